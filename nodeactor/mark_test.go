package nodeactor

import (
	"strings"
	"testing"

	"github.com/redlock-go/redlock/testutil"
)

// TestMarkCheck runs a marking copy's mark() on a real server: it returns
// the identity passed only when the arm key holds it and the node's
// master_replid is the identity's; the plain script's mark() returns ""
// whatever it is passed.
func TestMarkCheck(t *testing.T) {
	testutil.RequireRedis(t)
	srv := testutil.StartServer(t, testutil.ServerOptions{})
	info, err := srv.Do("INFO", "server")
	if err != nil {
		t.Fatal(err)
	}
	repl, err := srv.Do("INFO", "replication")
	if err != nil {
		t.Fatal(err)
	}
	id := infoField(info, "run_id") + "/" + infoField(repl, "master_replid")
	otherReplid := infoField(info, "run_id") + "/" + strings.Repeat("f", 40)
	const arm = "t:{guard}:armed"
	s := newScript("marktest", MarkLine+"\nreturn mark()")
	m := s.markedFor("t:", id)
	run := func(body, armed, pass string) string {
		t.Helper()
		if _, err := srv.Do("SET", arm, armed); err != nil {
			t.Fatal(err)
		}
		out, err := srv.Do("EVAL", body, "1", arm, pass)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	for _, tc := range []struct {
		name, body, armed, pass, want string
	}{
		{"armed under the identity", m.Body, id, id, id},
		{"the arm key holds another identity", m.Body, "x/" + strings.Repeat("a", 40), id, ""},
		{"the replication id is not the identity's", m.Body, otherReplid, otherReplid, ""},
		{"the plain script", s.Body, id, id, ""},
	} {
		if got := run(tc.body, tc.armed, tc.pass); got != tc.want {
			t.Errorf("%s: mark() = %q, want %q", tc.name, got, tc.want)
		}
	}
	if _, err := srv.Do("DEL", arm); err != nil {
		t.Fatal(err)
	}
	if out, err := srv.Do("EVAL", m.Body, "1", arm, id); err != nil || out != "" {
		t.Errorf("arm key missing: mark() = %q, %v; want \"\"", out, err)
	}
}

// TestMarkerUnchangedAcrossVersions: the armed marker is how a process
// tells that some guard, of any version, armed a node. Its SHA must stay
// what the released versions load, whatever changes in the armed check;
// else a new process finds every node armed by an older one unarmed, and
// counts none of them until the horizon. The SHAs are those of the
// version before the check's plain find (0cd1e99), for two guard tags.
func TestMarkerUnchangedAcrossVersions(t *testing.T) {
	for tag, want := range map[string]string{
		"redlock:": "1e83bf7ee484492ba98ac0703a0117a9e551413e",
		"app:":     "07ff132d674dfe48df9ad16d239242d98b56184f",
	} {
		if got := armedMarker(tag).SHA; got != want {
			t.Errorf("the armed marker for tag %q has SHA %s, want %s (the released versions')", tag, got, want)
		}
	}
}
