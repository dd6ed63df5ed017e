// Package objkey owns the one key format of streamed objects within a kind:
// "namespace/name", or "name" for a cluster-scoped object (as client-go's
// cache.MetaNamespaceKeyFunc). It imports nothing but the messages, so that
// decision packages, which must not link gRPC, use the same format as
// pkg/stream's store and every controller.
package objkey

import watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"

// Of returns obj's key: "namespace/name", or "name" when it has no namespace.
func Of(obj *watcherv1.Object) string {
	return Join(obj.GetMeta().GetNamespace(), obj.GetMeta().GetName())
}

// Join returns the key of the object namespace/name.
func Join(namespace, name string) string {
	if namespace == "" {
		return name
	}
	return namespace + "/" + name
}
