// Package coordinator is the entry point of redlock. New starts one node
// actor per independent Redis master and the notify router, and wires the
// push messages of the first to the second. The coordinator fans each
// operation out to every node in parallel, tallies the quorum (deciding as
// soon as it is won or can no longer be won), computes validity, rolls back
// partial or abandoned grants, and runs one renewal scheduler for every held
// lease, batching renewals per node.
package coordinator
