package nodeactor

import (
	"strconv"
	"sync"
)

// SlotTag returns a hash tag whose Redis Cluster slot is slot: the first
// "g<k>" (k = 0, 1, ...) that hashes there. Every process computes the same
// table, so a key named "<prefix>{" + SlotTag(s) + "}:..." lands on slot s
// in every process. The per-master node guard names each slot's arm
// marker by it (docs/lock.md, "Arm marker per slot"). The table is built
// once, on first use (about 170 000 CRC16s of short strings).
func SlotTag(slot uint16) string {
	slotTags.once.Do(buildSlotTags)
	return slotTags.tags[slot%numSlots]
}

var slotTags struct {
	once sync.Once
	tags [numSlots]string
}

func buildSlotTags() {
	left := numSlots
	for k := 0; left > 0; k++ {
		tag := "g" + strconv.Itoa(k)
		if s := Slot(tag); slotTags.tags[s] == "" {
			slotTags.tags[s] = tag
			left--
		}
	}
}
