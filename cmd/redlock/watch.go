package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/primitives"
)

// watchLeader is `redlock status --watch NAME`: one line per change of
// who leads the Lock called name (Lock.Watch), until interrupted.
func watchLeader(ctx context.Context, c *coordinator.Coordinator, name string, asJSON bool, out io.Writer) error {
	l, err := primitives.NewLock(c, name)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(out)
	err = l.Watch(ctx, func(s primitives.Leadership) {
		if !asJSON {
			fmt.Fprintf(out, "%s %s\n", time.Now().Format("15:04:05.000"), s)
			return
		}
		doc := map[string]any{"key": name, "state": s.State.String(), "since": s.Since.Format(time.RFC3339Nano)}
		if s.State == primitives.Leading {
			doc["holder"], doc["fence"] = infoJSON(s.Holder), s.Fence
		}
		_ = enc.Encode(doc)
	})
	if ctx.Err() != nil {
		return nil // interrupted: the normal end of a watch
	}
	return err
}
