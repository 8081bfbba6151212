package testutil

import (
	"testing"
	"time"
)

// CutLink cuts replica's replication link for good: the replica is told
// to authenticate to its master as a user that does not exist there, and
// the master (found among servers by its address) drops its replica
// connections. The replica keeps retrying and failing, so it receives no
// write its master takes from now on, and it keeps serving what it had:
// a lossy failover's replica. Clients are untouched. It works on a link
// no [Proxy] is on (a cluster replica follows the address its master
// announces to clients too; a failed-over master replicates directly).
// CutLink waits until the replica reports its link down.
func CutLink(t testing.TB, replica *Server, servers ...*Server) {
	t.Helper()
	info, err := replica.Do("INFO", "replication")
	if err != nil || infoField(info, "role") != "slave" {
		t.Fatalf("CutLink: %s is not a replica: %v", replica.Addr(), err)
	}
	master := infoField(info, "master_host") + ":" + infoField(info, "master_port")
	for _, kv := range [][2]string{{"masteruser", "redlock-cut-link"}, {"masterauth", "cut"}} {
		if _, err := replica.Do("CONFIG", "SET", kv[0], kv[1]); err != nil {
			t.Fatalf("CutLink: CONFIG SET %s: %v", kv[0], err)
		}
	}
	var m *Server
	for _, s := range servers {
		if s.Addr() == master {
			m = s
		}
	}
	if m == nil {
		t.Fatalf("CutLink: the replica's master %s is not among the servers given", master)
	}
	if _, err := m.Do("CLIENT", "KILL", "TYPE", "replica"); err != nil {
		t.Fatalf("CutLink: CLIENT KILL TYPE replica on %s: %v", master, err)
	}
	deadline := time.Now().Add(clusterTimeout)
	for {
		info, err := replica.Do("INFO", "replication")
		if err == nil && infoField(info, "master_link_status") == "down" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("CutLink: %s still linked to %s after %v", replica.Addr(), master, clusterTimeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
