package testkit

import (
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redlock-go/redlock/testutil"
)

// RanLog is one server's log of the commands it ran: its slowlog, with a
// zero threshold. It tells a test that a request which changes nothing
// when all is well (a late rollback, a late copy of an attempt) has run,
// where a fixed sleep could only guess how long that takes.
type RanLog struct{ s *testutil.Server }

// LogRan starts logging every command s runs, from an empty log.
func LogRan(t testing.TB, s *testutil.Server) *RanLog {
	t.Helper()
	Admin(t, s, "CONFIG", "SET", "slowlog-log-slower-than", "0")
	Admin(t, s, "CONFIG", "SET", "slowlog-max-len", "100000")
	Admin(t, s, "SLOWLOG", "RESET")
	return &RanLog{s}
}

// Count returns how many arguments of the commands logged so far equal
// arg: an op name such as "rollback", which each script call names once.
// (A slowlog entry keeps a command's first 32 arguments, each cut to 128
// bytes: the op names of the lock scripts are among them.)
func (l *RanLog) Count(t testing.TB, arg string) int {
	t.Helper()
	n := 0
	for _, f := range strings.Fields(Admin(t, l.s, "SLOWLOG", "GET", "100000")) {
		if strings.Trim(f, "[]") == arg {
			n++
		}
	}
	return n
}

// Clients returns how many clients (connections) ran a command with the
// argument arg since LogRan. A slowlog entry ends with its client's
// address, after the command's arguments.
func (l *RanLog) Clients(t testing.TB, arg string) int {
	t.Helper()
	clients := map[string]bool{}
	named := false // the entry read so far names arg
	for _, f := range strings.Fields(Admin(t, l.s, "SLOWLOG", "GET", "100000")) {
		f = strings.Trim(f, "[]")
		if f == arg {
			named = true
			continue
		}
		if _, port, err := net.SplitHostPort(f); named && err == nil && port != "" {
			clients[f], named = true, false
		}
	}
	return len(clients)
}

// Ran reports whether the server ran a command, since LogRan, among whose
// arguments are every one of args (a script's op name and a waiter id,
// say). Each slowlog entry is read as one command.
func (l *RanLog) Ran(t testing.TB, args ...string) bool {
	t.Helper()
	for _, e := range slowlogEntries(Admin(t, l.s, "SLOWLOG", "GET", "100000")) {
		fields := strings.Fields(strings.NewReplacer("[", " ", "]", " ").Replace(e))
		all := true
		for _, a := range args {
			all = all && slices.Contains(fields, a)
		}
		if all {
			return true
		}
	}
	return false
}

// Naming returns the commands logged since LogRan that name arg among
// their arguments, oldest first, each as its arguments (a failing
// test's evidence).
func (l *RanLog) Naming(t testing.TB, arg string) []string {
	t.Helper()
	var out []string
	entries := slowlogEntries(Admin(t, l.s, "SLOWLOG", "GET", "100000"))
	for _, e := range slices.Backward(entries) { // SLOWLOG GET lists the newest first
		fields := strings.Fields(strings.NewReplacer("[", " ", "]", " ").Replace(e))
		if slices.Contains(fields, arg) {
			out = append(out, strings.Join(fields, " "))
		}
	}
	return out
}

// slowlogEntries cuts a rendered SLOWLOG GET reply, "[[entry] [entry]]",
// into its entries.
func slowlogEntries(reply string) []string {
	var out []string
	depth, start := 0, 0
	for i, r := range reply {
		switch r {
		case '[':
			if depth++; depth == 2 {
				start = i
			}
		case ']':
			if depth--; depth == 1 {
				out = append(out, reply[start:i+1])
			}
		}
	}
	return out
}

// AwaitRan waits until the server ran n commands with the argument arg
// since LogRan; the test fails, naming what, after 10 s.
func (l *RanLog) AwaitRan(t *testing.T, arg string, n int, what string) {
	t.Helper()
	testutil.WaitFor(t, 10*time.Second, what, func() bool { return l.Count(t, arg) >= n })
}

// LogRanAll is LogRan on each server.
func LogRanAll(t testing.TB, srv []*testutil.Server) []*RanLog {
	t.Helper()
	logs := make([]*RanLog, len(srv))
	for i, s := range srv {
		logs[i] = LogRan(t, s)
	}
	return logs
}

// Scripts returns the script calls (EVALSHA, EVAL, FCALL) the server ran
// since LogRan that name sub in their logged arguments, each as the
// slowlog renders it. A resource's hash tag ("{name}") finds its scripts:
// a joined call once (its first element's keys are among the first 32
// arguments), and never the node guard's, which name no resource. This
// count is exact. INFO commandstats less the guard's own count is not: a
// guard script is counted as it is sent, and until the server ran it the
// difference is one short.
func (l *RanLog) Scripts(t testing.TB, sub string) []string {
	t.Helper()
	var out []string
	for _, e := range slowlogEntries(Admin(t, l.s, "SLOWLOG", "GET", "100000")) {
		if !strings.Contains(e, sub) {
			continue
		}
		// an entry: id, time, duration, then the command's name and arguments
		f := strings.Fields(strings.NewReplacer("[", " ", "]", " ").Replace(e))
		if len(f) > 3 && scriptCommands[strings.ToUpper(f[3])] {
			out = append(out, e)
		}
	}
	return out
}

var scriptCommands = map[string]bool{"EVALSHA": true, "EVAL": true, "EVALSHA_RO": true, "EVAL_RO": true, "FCALL": true, "FCALL_RO": true}

// ScriptCounts returns, per log, how many scripts naming sub its server
// ran since LogRan (Scripts).
func ScriptCounts(t testing.TB, logs []*RanLog, sub string) []int {
	t.Helper()
	n := make([]int, len(logs))
	for i, l := range logs {
		n[i] = len(l.Scripts(t, sub))
	}
	return n
}
