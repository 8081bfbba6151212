package redisproc

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

// NilReply is the string [Process.Do] returns for a nil reply (for example
// GET on a missing key).
const NilReply = "(nil)"

// errNoCommand is Do's answer to an empty command.
var errNoCommand = errors.New("no command given")

// replyError is an error reply (a "-ERR ..." line) sent by the server.
type replyError string

func (e replyError) Error() string { return "redis error reply: " + string(e) }

// roundTrip sends one command on a fresh rueidis connection to addr and
// renders its reply. The connection speaks RESP2, so replies keep the shape
// redis-cli shows: CONFIG GET answers a flat array, not a map.
func roundTrip(addr string, timeout time.Duration, password string, tlsCfg *TLS, args ...string) (string, error) {
	if len(args) == 0 {
		return "", errNoCommand
	}
	opt := rueidis.ClientOption{
		InitAddress:       []string{addr},
		Password:          password,
		Dialer:            net.Dialer{Timeout: timeout},
		ConnWriteTimeout:  timeout,
		DisableCache:      true,
		DisableRetry:      true,
		AlwaysRESP2:       true,
		ForceSingleClient: true,
		ClientSetInfo:     rueidis.DisableClientSetInfo,
	}
	if tlsCfg != nil {
		opt.TLSConfig = tlsCfg.Client.Clone()
	}
	cl, err := rueidis.NewClient(opt)
	if err != nil {
		return "", err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	msg, err := cl.Do(ctx, cl.B().Arbitrary(args...).Build()).ToMessage()
	if err != nil && !rueidis.IsRedisNil(err) {
		if re, ok := rueidis.IsRedisErr(err); ok {
			return "", replyError(withCode(re.Error()))
		}
		return "", err
	}
	return render(&msg), nil
}

// render flattens a reply: arrays to "[a b c]", nils to [NilReply], and
// nested error replies to "(error ...)".
func render(m *rueidis.RedisMessage) string {
	switch {
	case m.IsNil():
		return NilReply
	case m.IsInt64():
		n, _ := m.AsInt64()
		return strconv.FormatInt(n, 10)
	case m.IsArray():
		elems, _ := m.ToArray()
		out := make([]string, len(elems))
		for i := range elems {
			out[i] = render(&elems[i])
		}
		return "[" + strings.Join(out, " ") + "]"
	}
	if err := m.Error(); err != nil {
		return "(error " + withCode(err.Error()) + ")"
	}
	s, _ := m.ToString()
	return s
}

// withCode restores the "ERR " that rueidis strips from generic errors.
// An error reply starts with an upper-case code word; "ERR" is the generic one.
func withCode(msg string) string {
	code, _, _ := strings.Cut(msg, " ")
	if code == "" || strings.ToUpper(code) != code {
		return "ERR " + msg
	}
	return msg
}
