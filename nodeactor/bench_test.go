package nodeactor_test

import (
	"context"
	"testing"

	"github.com/redis/rueidis"
	"github.com/redlock-go/redlock/nodeactor"
	"github.com/redlock-go/redlock/testutil"
)

// BenchmarkActorDo compares one round trip through the actor with the same
// command sent with plain rueidis (the actor's overhead).
func BenchmarkActorDo(b *testing.B) {
	testutil.RequireRedis(b)
	s := testutil.StartServer(b, testutil.ServerOptions{})
	b.Run("rueidis", func(b *testing.B) {
		cl, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{s.Addr()}, DisableCache: true})
		if err != nil {
			b.Fatal(err)
		}
		defer cl.Close()
		ctx := context.Background()
		for range b.N {
			if err := cl.Do(ctx, cl.B().Ping().Build()).Error(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("actor", func(b *testing.B) {
		a := nodeactor.New(nodeactor.Options{Addr: s.Addr(), Client: rueidis.ClientOption{InitAddress: []string{s.Addr()}}, Logger: quiet})
		defer a.Close()
		<-a.Ready()
		ctx := context.Background()
		b.ResetTimer()
		for range b.N {
			if r := a.Do(ctx, nodeactor.Normal, nodeactor.Call{Args: []string{"PING"}}); r.Err != nil {
				b.Fatal(r.Err)
			}
		}
	})
}
