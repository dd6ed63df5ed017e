module github.com/ipledger/ipledger/services/ipam

go 1.26.8

require (
	github.com/ipledger/ipledger/pkg v0.0.0
	github.com/ipledger/ipledger/proto v0.0.0
)

require (
	github.com/prometheus/client_golang v1.25.0 // indirect
	golang.org/x/net v0.60.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
	golang.org/x/text v0.42.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260817212433-ac3dfec99bb1 // indirect
	google.golang.org/grpc v1.85.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
	k8s.io/api v0.37.2 // indirect
	k8s.io/apimachinery v0.37.2 // indirect
	k8s.io/client-go v0.37.2 // indirect
)

replace github.com/ipledger/ipledger/proto => ../../proto

replace github.com/ipledger/ipledger/pkg => ../../pkg
