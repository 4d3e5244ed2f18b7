//go:build !synapse_unsafe_keep_serving

package cluster

// keepServingPastLease is false in every real build: a hub stops granting
// when its lease can no longer be renewed (rules 1, 3, 4) and every write
// is guarded by its owner key (rule 2). See unsafe_on.go.
const keepServingPastLease = false
