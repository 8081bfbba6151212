//go:build !unix

package primitives_test

import "time"

func processCPU() (time.Duration, bool) { return 0, false }

func processSwitches() (int64, bool) { return 0, false }
