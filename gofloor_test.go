package redlock_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// The core module needs no newer Go than rueidis, its Redis client: a
// service pinned one release back can still take the lock. A dependency
// bump that raises go.mod's go line past rueidis's fails here (pin the
// newest version of it whose own floor is low enough, as OpenTelemetry
// v1.46 and x/sync v0.22 are).
func TestGoFloorIsRueidis(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "-json", "github.com/redis/rueidis").Output()
	if err != nil {
		t.Fatalf("go list -m rueidis: %v", err)
	}
	var m struct{ GoMod string }
	if err := json.Unmarshal(out, &m); err != nil || m.GoMod == "" {
		t.Fatalf("go list -m rueidis: %q, %v", out, err)
	}
	theirs := goLine(t, m.GoMod)
	ours := goLine(t, "go.mod")
	if compareGo(ours, theirs) > 0 {
		t.Errorf("go.mod says go %s, above rueidis's go %s: users must upgrade Go to use the lock", ours, theirs)
	}
}

// goLine returns the go directive's version in the go.mod file at path.
func goLine(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "go "); ok {
			return v
		}
	}
	t.Fatalf("%s: no go line", path)
	return ""
}

// compareGo compares two Go versions such as 1.25 and 1.25.0.
func compareGo(a, b string) int {
	pa, pb := strings.Split(a, "."), strings.Split(b, ".")
	for i := range max(len(pa), len(pb)) {
		var x, y int
		if i < len(pa) {
			x = atoi(pa[i])
		}
		if i < len(pb) {
			y = atoi(pb[i])
		}
		if x != y {
			if x < y {
				return -1
			}
			return 1
		}
	}
	return 0
}

func atoi(s string) int {
	n := 0
	for _, c := range s {
		if c < '0' || c > '9' {
			break
		}
		n = n*10 + int(c-'0')
	}
	return n
}
