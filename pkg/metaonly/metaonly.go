// Package metaonly asks the API server to answer a write with the written
// object's metadata only (PartialObjectMetadata), and reads that answer.
// A controller that only needs the new resourceVersion of what it wrote
// then never decodes the whole object back: for a Service status that was
// most of ipam's garbage during a cold start, for a ledger shard of up to
// 480 KiB a copy of everything it had just sent.
package metaonly

import (
	"encoding/json"
	"fmt"
)

// Accept is the Accept header of such a write. An API server that cannot
// transform its answer sends the whole object as JSON, which Parse reads
// all the same.
const Accept = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1, application/json"

// Meta is what a write's answer says of the object after it.
type Meta struct {
	ResourceVersion string
	Annotations     map[string]string
}

// Parse reads the answer to a write sent with Accept. An answer without a
// resourceVersion is an error: the caller could not write conditionally
// on it again.
func Parse(raw []byte) (Meta, error) {
	var out struct {
		Metadata struct {
			ResourceVersion string            `json:"resourceVersion"`
			Annotations     map[string]string `json:"annotations"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return Meta{}, fmt.Errorf("the answer is not an object (%v): %.200q", err, raw)
	}
	if out.Metadata.ResourceVersion == "" {
		return Meta{}, fmt.Errorf("the answer carries no resourceVersion: %.200q", raw)
	}
	return Meta{ResourceVersion: out.Metadata.ResourceVersion, Annotations: out.Metadata.Annotations}, nil
}
