package testutil

import "time"

// SetGiveSlotGap pauses GiveSlot for d between its two steps.
func (c *Cluster) SetGiveSlotGap(d time.Duration) { c.giveSlotGap = d }
