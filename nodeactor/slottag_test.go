package nodeactor_test

import (
	"testing"

	"github.com/redlock-go/redlock/nodeactor"
)

// Every slot has a tag, the tag hashes to its slot (also inside a key, as
// the hash tag), and the table is the same on every call.
func TestSlotTagCoversEverySlot(t *testing.T) {
	seen := map[string]bool{}
	for s := range uint16(16384) {
		tag := nodeactor.SlotTag(s)
		if tag == "" || seen[tag] {
			t.Fatalf("slot %d: tag %q empty or shared", s, tag)
		}
		seen[tag] = true
		if got := nodeactor.Slot("redlock:{" + tag + "}:armed"); got != s {
			t.Fatalf("slot %d: tag %q hashes to %d", s, tag, got)
		}
	}
	// the first candidate always wins its slot: the table is fixed
	if got := nodeactor.SlotTag(nodeactor.Slot("g0")); got != "g0" {
		t.Fatalf("SlotTag(Slot(g0)) = %q, want g0", got)
	}
}
