// Package coordinator is the entry point of redlock. New starts one node
// actor per independent Redis master and the notify router, and wires the
// push messages of the first to the second. Behind it, the engine fans each
// operation out to every node in parallel, tallies the quorum (deciding as
// soon as it is won or can no longer be won), computes validity, rolls back
// partial or abandoned grants, and runs one renewal scheduler for every held
// lease, batching renewals per node. Its primitives live in package
// primitives; this package holds the configuration, the lifecycle
// (New, Close, Done), the node view (Nodes, N, Quorum) and the errors.
package coordinator
