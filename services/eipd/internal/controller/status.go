package controller

import "sync"

// States of a Node's Elastic IP, as ListAddresses reports them.
const (
	StateAssociated = "Associated"
	StateAllocated  = "Allocated"
	StatePending    = "Pending"
	StateOrphaned   = "Orphaned"
	StateError      = "Error"
)

// NodeStatus is the outcome of a Node's last sync.
type NodeStatus struct {
	State, Message string
}

// StatusBook keeps the outcome of each Node's last sync for the gRPC API.
// It is written only by the leader's syncs; a standby's book is empty.
type StatusBook struct {
	mu    sync.RWMutex
	nodes map[string]NodeStatus
}

// NewStatusBook returns an empty book.
func NewStatusBook() *StatusBook { return &StatusBook{nodes: map[string]NodeStatus{}} }

// Set records a Node's outcome.
func (b *StatusBook) Set(node, state, message string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.nodes[node] = NodeStatus{State: state, Message: message}
}

// Forget drops a Node.
func (b *StatusBook) Forget(node string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.nodes, node)
}

// Get returns a Node's last outcome.
func (b *StatusBook) Get(node string) (NodeStatus, bool) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	s, ok := b.nodes[node]
	return s, ok
}

// Reset forgets every Node.
func (b *StatusBook) Reset() {
	b.mu.Lock()
	defer b.mu.Unlock()
	clear(b.nodes)
}
