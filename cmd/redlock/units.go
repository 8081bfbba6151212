package main

import (
	"flag"
	"strconv"
	"strings"
	"time"
)

// checkUnits fails a duration flag given a bare number ("--ttl 5"), which
// flag would refuse with only "parse error": it says which unit to add.
// It reads args as fs.Parse would, up to "--"; other errors are left to
// fs.Parse.
func checkUnits(fs *flag.FlagSet, args []string) error {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return nil
		}
		if !strings.HasPrefix(a, "-") {
			continue
		}
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		f := fs.Lookup(name)
		if f == nil {
			continue
		}
		g, ok := f.Value.(flag.Getter)
		if !ok {
			continue
		}
		if _, isDur := g.Get().(time.Duration); !isDur {
			if bf, ok := f.Value.(interface{ IsBoolFlag() bool }); !hasVal && !(ok && bf.IsBoolFlag()) {
				i++ // its value
			}
			continue
		}
		if !hasVal {
			if i+1 >= len(args) {
				return nil
			}
			i++
			val = args[i]
		}
		if _, err := time.ParseDuration(val); err == nil {
			continue
		}
		if _, err := strconv.ParseFloat(val, 64); err == nil {
			return usageErr("--%s %s has no unit: add one, e.g. %q (or %q, %q)", name, val, val+"s", val+"ms", val+"m")
		}
	}
	return nil
}
