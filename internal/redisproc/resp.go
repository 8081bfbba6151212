package redisproc

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// NilReply is the string [Process.Do] and [ReadReply] return for a RESP2 nil
// bulk string or nil array (for example GET on a missing key).
const NilReply = "(nil)"

// replyError is an error reply (a "-ERR ..." line) sent by the server.
type replyError string

func (e replyError) Error() string { return "redis error reply: " + string(e) }

// appendCommand encodes args as a RESP2 array of bulk strings.
func appendCommand(b []byte, args []string) []byte {
	b = append(b, '*')
	b = strconv.AppendInt(b, int64(len(args)), 10)
	b = append(b, '\r', '\n')
	for _, a := range args {
		b = append(b, '$')
		b = strconv.AppendInt(b, int64(len(a)), 10)
		b = append(b, '\r', '\n')
		b = append(b, a...)
		b = append(b, '\r', '\n')
	}
	return b
}

// roundTrip sends one command over conn (AUTH first when password is not
// empty) and reads its reply, all within timeout; it closes conn.
func roundTrip(conn net.Conn, timeout time.Duration, password string, args ...string) (string, error) {
	defer conn.Close()
	if len(args) == 0 {
		return "", errors.New("no command given")
	}
	if err := conn.SetDeadline(time.Now().Add(timeout)); err != nil {
		return "", err
	}
	var req []byte
	if password != "" {
		req = appendCommand(req, []string{"AUTH", password})
	}
	if _, err := conn.Write(appendCommand(req, args)); err != nil {
		return "", err
	}
	r := bufio.NewReader(conn)
	if password != "" {
		if _, err := ReadReply(r); err != nil {
			return "", err
		}
	}
	return ReadReply(r)
}

// ReadReply decodes one RESP2 reply. Arrays are flattened to "[a b c]",
// nils to [NilReply]; an error reply is returned as an error. When both a
// top-level error reply and nested error elements exist, only the
// top-level one is an error; nested ones are rendered as "(error ...)".
func ReadReply(r *bufio.Reader) (string, error) {
	line, err := readLine(r)
	if err != nil {
		return "", err
	}
	if len(line) == 0 {
		return "", errors.New("empty reply line")
	}
	body := line[1:]
	switch line[0] {
	case '+':
		return body, nil
	case '-':
		return "", replyError(body)
	case ':':
		if _, err := strconv.ParseInt(body, 10, 64); err != nil {
			return "", fmt.Errorf("bad integer reply %q", body)
		}
		return body, nil
	case '$':
		n, err := strconv.Atoi(body)
		if err != nil || n < -1 {
			return "", fmt.Errorf("bad bulk length %q", body)
		}
		if n == -1 {
			return NilReply, nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		if buf[n] != '\r' || buf[n+1] != '\n' {
			return "", errors.New("bulk string not terminated by CRLF")
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(body)
		if err != nil || n < -1 {
			return "", fmt.Errorf("bad array length %q", body)
		}
		if n == -1 {
			return NilReply, nil
		}
		elems := make([]string, 0, n)
		for range n {
			e, err := ReadReply(r)
			var re replyError
			if errors.As(err, &re) {
				e, err = "(error "+string(re)+")", nil
			}
			if err != nil {
				return "", err
			}
			elems = append(elems, e)
		}
		return "[" + strings.Join(elems, " ") + "]", nil
	default:
		return "", fmt.Errorf("unsupported reply type %q", line[0])
	}
}

// readLine reads a CRLF-terminated line and returns it without the CRLF.
func readLine(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	if len(line) < 2 || line[len(line)-2] != '\r' {
		return "", fmt.Errorf("reply line not terminated by CRLF: %q", line)
	}
	return line[:len(line)-2], nil
}
