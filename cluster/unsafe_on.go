//go:build synapse_unsafe_keep_serving

package cluster

// keepServingPastLease is a deliberately broken build, made only by the
// fleet linearizability harness's self-check (linz, -tags
// synapse_unsafe_keep_serving): the hub never fences, keeps every namespace
// it once installed after another hub took it, and writes without the
// owner-key guard — a hub that keeps serving past its lease. The harness
// must report it; no release is ever built with this tag.
const keepServingPastLease = true
