package torture

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"testing"

	"go.uber.org/goleak"
)

// TestMain is also the worker process of the soaks the tests run: [Run]
// re-executes its self, the test binary here, as `torture --worker ...`.
func TestMain(m *testing.M) {
	if len(os.Args) > 2 && os.Args[1] == "torture" && os.Args[2] == "--worker" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err := RunWorker(ctx, os.Args[3:], os.Stdout, os.Stderr)
		stop()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}
