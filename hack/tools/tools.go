//go:build tools

// Package tools pins the command-line tools that ipledger builds from the Go
// module proxy: the local control plane (kube-apiserver, kubectl, etcd) and
// the protobuf and gRPC tooling (buf, protoc plugins, grpcurl).
package tools

import (
	_ "github.com/bufbuild/buf/cmd/buf"
	_ "github.com/fullstorydev/grpcurl/cmd/grpcurl"
	_ "google.golang.org/grpc/cmd/protoc-gen-go-grpc"
	_ "google.golang.org/protobuf/cmd/protoc-gen-go"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
