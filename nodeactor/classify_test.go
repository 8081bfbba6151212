package nodeactor_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/redlock-go/redlock/nodeactor"
	"github.com/redlock-go/redlock/testutil"
)

// replyScript answers the error reply its argument spells, so that the
// tests below classify what a node's error reply really becomes on its way
// through rueidis and the actor: a *NodeError wrapping a *rueidis.RedisError
// (whose text has lost a leading "ERR ").
var replyScript = nodeactor.NewScript("error-reply", "return redis.error_reply(ARGV[1])")

// Error texts as the servers send them: Redis 7.0.15 (Debian 12), Redis
// 8.0.6 and Valkey 9.1.2 (Debian unstable, scripts/servers.sh), and the
// documented texts of the cluster and replication errors.
var classifyCases = []struct {
	name      string
	text      string
	transient bool
	noPerm    bool
}{
	// not now: retried
	{"loading", "LOADING Redis is loading the dataset in memory", true, false},
	{"loading valkey", "LOADING Valkey is loading the dataset in memory", true, false},
	{"busy script", "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.", true, false},
	{"busy valkey", "BUSY Valkey is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.", true, false},
	{"tryagain", "TRYAGAIN Multiple keys request during rehashing of slot", true, false},
	{"moved", "MOVED 3999 127.0.0.1:6381", true, false},
	{"ask", "ASK 3999 127.0.0.1:6381", true, false},
	{"clusterdown", "CLUSTERDOWN The cluster is down", true, false},
	{"clusterdown slot", "CLUSTERDOWN Hash slot not served", true, false},
	{"masterdown", "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.", true, false},
	{"readonly replica", "READONLY You can't write against a read only replica.", true, false},
	{"readonly in script", "READONLY You can't write against a read only replica. script: 1bae58f5987a5f51b4735899cd21a9fd9c5bd4db, on @user_script:1.", true, false},
	{"noreplicas", "NOREPLICAS Not enough good replicas to write.", true, false},
	{"unblocked", "UNBLOCKED client unblocked via CLIENT UNBLOCK", true, false},
	{"noscript", "NOSCRIPT No matching script. Please use EVAL.", true, false},
	{"max clients", "ERR max number of clients reached", true, false},

	// answers: not retried
	{"wrongtype in script", "WRONGTYPE Operation against a key holding the wrong kind of value script: 1bae58f5987a5f51b4735899cd21a9fd9c5bd4db, on @user_script:1.", false, false},
	{"busykey is not busy", "BUSYKEY Target key name already exists.", false, false},
	{"busygroup is not busy", "BUSYGROUP Consumer Group name already exists", false, false},
	{"oom in script", "OOM command not allowed when used memory > 'maxmemory'. script: 59933084b3628c8bf43b54e2d1ff9172af9cfc37, on @user_script:1.", false, false},
	{"misconf", "MISCONF Redis is configured to save RDB snapshots, but it's currently unable to persist to disk.", false, false},
	{"unknown command in script 7", "ERR Unknown Redis command called from script script: 206396248e12c6e742fd7296250433c8d7343b74, on @user_script:1.", false, false},
	{"unknown command in script valkey", "ERR Unknown command called from script script: on @user_script:1.", false, false},
	{"syntax error (SET IFEQ on 7.0 and 8.0)", "ERR syntax error", false, false},
	{"unknown command", "ERR unknown command 'DELEX', with args beginning with: 'k' 'IFEQ' 'v' ", false, false},
	{"crossslot", "CROSSSLOT Keys in request don't hash to the same slot", false, false},
	{"script runtime error", "ERR user_script:1: Script attempted to access nonexistent global variable 'x' script: 1bae58f5987a5f51b4735899cd21a9fd9c5bd4db, on @user_script:1.", false, false},

	// ACL refusals: not retried, and recognised as such
	{"redis 7 script command", "ERR The user executing the script can't run this command or subcommand script: caeeee01384f6b04384c56d69c27aa65287fb306, on @user_script:1.", false, true},
	{"redis 7 script key", "ERR The user executing the script can't access at least one of the keys mentioned in the command arguments script: 733db9816e9c67c4cc15572d4e80f4ebb13b5cdc, on @user_script:1.", false, true},
	{"redis 7 script channel", "ERR The user executing the script can't publish to the channel mentioned in the command script: 99e2c6c1369818e43097a0ef33a592960f3060ab, on @user_script:1.", false, true},
	{"redis 7 noperm command", "NOPERM this user has no permissions to run the 'set' command", false, true},
	{"redis 7 noperm key", "NOPERM this user has no permissions to access one of the keys used as arguments", false, true},
	{"redis 8 script command", "ERR ACL failure in script: User nowrite has no permissions to run the 'set' command script: caeeee01384f6b04384c56d69c27aa65287fb306, on @user_script:1.", false, true},
	{"redis 8 script key", "ERR ACL failure in script: No permissions to access a key script: 733db9816e9c67c4cc15572d4e80f4ebb13b5cdc, on @user_script:1.", false, true},
	{"valkey script command", "ERR ACL failure in script: User noread has no permissions to run the 'get' command script: on @user_script:1.", false, true},
	{"valkey script channel", "ERR ACL failure in script: No permissions to access a channel script: on @user_script:1.", false, true},
	{"redis 8 noperm command", "NOPERM User nowrite has no permissions to run the 'set' command", false, true},
	{"valkey noperm key", "NOPERM No permissions to access a key", false, true},
}

func TestClassifyErrorReplies(t *testing.T) {
	t.Parallel()
	ms := testutil.StartMinis(t, 1)
	a := start(t, ms[0].Addr())
	ready(t, a)
	for _, tt := range classifyCases {
		t.Run(tt.name, func(t *testing.T) {
			rep := a.Do(context.Background(), nodeactor.Normal, nodeactor.Call{Script: replyScript, Args: []string{tt.text}})
			var re *rueidis.RedisError
			if !errors.As(rep.Err, &re) || re.Error() != strings.TrimPrefix(tt.text, "ERR ") { // rueidis strips "ERR "
				t.Fatalf("reply %v, %v: want the error reply %q", rep.Msg, rep.Err, tt.text)
			}
			if got := nodeactor.Transient(rep.Err); got != tt.transient {
				t.Errorf("Transient(%q) = %v, want %v", rep.Err, got, tt.transient)
			}
			if got := nodeactor.IsNoPerm(rep.Err); got != tt.noPerm {
				t.Errorf("IsNoPerm(%q) = %v, want %v", rep.Err, got, tt.noPerm)
			}
			// wrapped once more, as the primitives' errors do
			if got := nodeactor.Transient(fmt.Errorf("attempt: %w", rep.Err)); got != tt.transient {
				t.Errorf("Transient(wrapped %q) = %v, want %v", rep.Err, got, tt.transient)
			}
		})
	}
}

// A nil reply is an answer (a failed condition), not an error of any kind.
func TestClassifyNilReply(t *testing.T) {
	t.Parallel()
	ms := testutil.StartMinis(t, 1)
	a := start(t, ms[0].Addr())
	ready(t, a)
	rep := a.Do(context.Background(), nodeactor.Normal, nodeactor.Call{Keys: []string{"missing"}, Args: []string{"GET"}})
	if rep.Err != nil || !rep.Msg.IsNil() {
		t.Fatalf("GET missing = %v, %v; want nil", rep.Msg, rep.Err)
	}
	_, err := rep.Msg.ToString()
	if !rueidis.IsRedisNil(err) {
		t.Fatalf("ToString of nil = %v", err)
	}
	if nodeactor.Transient(err) || nodeactor.IsNoPerm(err) {
		t.Errorf("nil reply classified as transient or NOPERM")
	}
}

// Errors below the protocol: no answer came, so the request may succeed
// when sent again; an actor that was closed, or an unknown error, is not.
func TestClassifyTransportErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"eof", io.EOF, true},
		{"unexpected eof", io.ErrUnexpectedEOF, true},
		{"reset", &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, true},
		{"refused", &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, true},
		{"broken pipe", os.NewSyscallError("write", syscall.EPIPE), true},
		{"closed conn", net.ErrClosed, true},
		{"deadline", context.DeadlineExceeded, true},
		{"io timeout", os.ErrDeadlineExceeded, true},
		{"canceled", context.Canceled, true},
		{"node down", &nodeactor.NodeError{Addr: "a:1", Err: nodeactor.ErrNodeDown}, true},
		{"not sent", fmt.Errorf("%w: %w", nodeactor.ErrNotSent, context.Canceled), true},
		{"mailbox full", nodeactor.ErrBusy, true},
		{"rueidis closing", &nodeactor.NodeError{Addr: "a:1", Err: rueidis.ErrClosing}, true},
		{"rueidis cache aborted", rueidis.ErrDoCacheAborted, true},
		{"rueidis no slot", rueidis.ErrNoSlot, true},
		{"rueidis conn expired", errors.New("connection is expired"), true},
		{"dns", &net.DNSError{Err: "no such host", Name: "x", IsNotFound: true}, true},
		{"nil", nil, false},
		{"closed actor", nodeactor.ErrClosed, false},
		{"unknown", errors.New("redlock: unexpected reply"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := nodeactor.Transient(tt.err); got != tt.want {
				t.Errorf("Transient(%v) = %v, want %v", tt.err, got, tt.want)
			}
			if nodeactor.IsNoPerm(tt.err) {
				t.Errorf("IsNoPerm(%v) = true", tt.err)
			}
		})
	}
}

// Errors of a connect that no wait can fix make a node unusable (New fails
// at once); a node that is down, slow or closing the connection is not.
// The refusals that are error replies (WRONGPASS, DB index) are tested on
// real servers (coordinator's TestNewNamesTheCause).
func TestUnusable(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		err  error
		want bool
	}{
		{"unknown host", &net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "no such host", Name: "x.invalid", IsNotFound: true}}, true},
		{"not RESP", errors.New("received unknown message type: 72"), true},
		{"dns server failure", &net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "server misbehaving", Name: "x", IsTemporary: true}}, false},
		{"refused", &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, false},
		{"eof", io.EOF, false},
		{"no answer", &nodeactor.NoAnswerError{What: "HELLO", Waited: time.Second, Err: context.DeadlineExceeded}, false},
	} {
		if got := nodeactor.Unusable(tt.err); got != tt.want {
			t.Errorf("%s: Unusable(%v) = %v, want %v", tt.name, tt.err, got, tt.want)
		}
	}
}
