package wire

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"

	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/trellis-proxy/trellis-proxy/pgerr"
)

const (
	// maxStartupPacket is Postgres's own cap on the startup packet
	// (MAX_STARTUP_PACKET_LENGTH) and pgproto3's.
	maxStartupPacket = 10000
	// maxAuthMessage caps client 'p' frames (PG_MAX_AUTH_TOKEN_LENGTH).
	maxAuthMessage = 65535
	// maxInspect caps frames read whole to be decoded; larger Query frames
	// pass through unclassified, larger server frames are streamed.
	maxInspect = 64 << 20
	// batchCap bounds the reusable buffers of the extended-protocol path
	// (a larger frame body is read into a buffer of its own and dropped).
	batchCap = 1 << 20
	// DefaultMaxMessageSize is the default cap of one client or server frame
	// body, Postgres's MaxAllocSize.
	DefaultMaxMessageSize = 1<<30 - 1

	protoSSLRequest    = 80877103
	protoGSSENCRequest = 80877104
	protoCancelRequest = 80877102
	// protoForwardedCancel (1234.5690, a code Postgres does not use) is a
	// CancelRequest one proxy of a fleet forwards to the proxy its secret
	// names; that proxy never forwards it again.
	protoForwardedCancel = 80877114
)

var errFrameTooLarge = errors.New("frame too large")

// peekHeader returns the type and body length of the next frame without
// consuming anything when it fails, so a wake-up deadline that interrupts it
// loses no bytes.
func peekHeader(br *connReader, max int) (typ byte, bodyLen int, err error) {
	h, err := br.Peek(5)
	if err != nil {
		return 0, 0, err
	}
	typ = h[0]
	n := int64(binary.BigEndian.Uint32(h[1:5]))
	if n < 4 {
		return typ, 0, pgerr.Newf(pgerr.ProtocolViolation, "invalid message length %d for message type %q", n, typ)
	}
	if n-4 > int64(max) {
		return typ, 0, pgerr.Newf(pgerr.ProtocolViolation, "invalid message length %d for message type %q (limit %d)", n, typ, max).Wrap(errFrameTooLarge)
	}
	if _, err := br.Discard(5); err != nil {
		return 0, 0, err
	}
	return typ, int(n - 4), nil
}

// readBody reads a body of n bytes into buf (grown as needed) and returns it.
func readBody(br *connReader, buf []byte, n int) ([]byte, error) {
	if cap(buf) < n {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	_, err := io.ReadFull(br, buf)
	return buf, err
}

// appendHeader appends a frame header for a body of n bytes.
func appendHeader(dst []byte, typ byte, n int) []byte {
	dst = append(dst, typ)
	return binary.BigEndian.AppendUint32(dst, uint32(n+4))
}

// readStartupPacket reads one length-prefixed startup-phase packet with exact
// reads (no read-ahead: TLS may start right after it).
func readStartupPacket(r io.Reader, buf []byte) ([]byte, error) {
	var h [4]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return nil, err
	}
	n := int(binary.BigEndian.Uint32(h[:]))
	if n < 8 || n > maxStartupPacket {
		return nil, pgerr.Newf(pgerr.ProtocolViolation, "invalid length of startup packet")
	}
	if cap(buf) < n-4 {
		buf = make([]byte, n-4)
	}
	buf = buf[:n-4]
	if _, err := io.ReadFull(r, buf); err != nil {
		return nil, err
	}
	return buf, nil
}

// parseStartupParams checks the key/value pairs of a StartupMessage body
// (after the protocol version) and returns them without the terminator:
// "key\0value\0...", the form SessionInfo keeps.
func parseStartupParams(body []byte) ([]byte, error) {
	all := body
	for len(body) > 0 {
		if body[0] == 0 {
			if len(body) != 1 {
				return nil, pgerr.New(pgerr.ProtocolViolation, "invalid startup packet layout: expected terminator as last byte")
			}
			return all[:len(all)-1], nil
		}
		_, rest, ok := scanCString(body)
		if !ok {
			return nil, pgerr.New(pgerr.ProtocolViolation, "invalid startup packet layout")
		}
		_, rest, ok = scanCString(rest)
		if !ok {
			return nil, pgerr.New(pgerr.ProtocolViolation, "invalid startup packet layout")
		}
		body = rest
	}
	return nil, pgerr.New(pgerr.ProtocolViolation, "invalid startup packet layout: expected terminator as last byte")
}

func cstring(b []byte) (string, []byte, bool) {
	for i, c := range b {
		if c == 0 {
			return string(b[:i]), b[i+1:], true
		}
	}
	return "", nil, false
}

// encodeError turns a pgerr.Error into an ErrorResponse (or NoticeResponse)
// frame: the one place where that happens (style §3.6). XX000 messages are
// replaced by a reference, with the full error logged.
func encodeError(dst []byte, e *pgerr.Error, notice bool, log *slog.Logger) []byte {
	msg := e.Message
	if e.Code == pgerr.InternalError && !notice {
		ref := newRef()
		if log != nil {
			log.Error("internal error", "ref", ref, "error", e.Error(), "cause", e.Err, "sqlstate", e.Code)
		}
		msg = "internal error in trellis-proxy (ref " + ref + ")"
	}
	sev := e.SeverityOrDefault()
	if notice && e.Severity == "" {
		sev = pgerr.SeverityNotice
	}
	code := e.Code
	if code == "" {
		code = pgerr.InternalError
		if notice {
			code = pgerr.SuccessfulCompletion
		}
	}
	er := pgproto3.ErrorResponse{
		Severity: sev, SeverityUnlocalized: sev, Code: code, Message: msg,
		Detail: e.DetailWithClass(), Hint: e.Hint, Position: int32(e.Position),
		InternalPosition: int32(e.InternalPosition), InternalQuery: e.InternalQuery, Where: e.Context,
	}
	var out []byte
	if notice {
		nr := pgproto3.NoticeResponse(er)
		out, _ = nr.Encode(dst)
	} else {
		out, _ = er.Encode(dst)
	}
	return out
}

// errorFromResponse converts a decoded upstream ErrorResponse to a pgerr.Error.
func errorFromResponse(er *pgproto3.ErrorResponse) *pgerr.Error {
	return &pgerr.Error{
		Severity: er.Severity, Code: er.Code, Message: er.Message, Detail: er.Detail, Hint: er.Hint,
		Position: int(er.Position), InternalPosition: int(er.InternalPosition), InternalQuery: er.InternalQuery,
		Context: er.Where,
	}
}

// asPgErr maps any error to a pgerr.Error for the client.
func asPgErr(err error) *pgerr.Error {
	if e, ok := pgerr.As(err); ok {
		return e
	}
	code := pgerr.CodeOf(err)
	return pgerr.New(code, err.Error()).Wrap(err)
}

func fatal(code, format string, args ...any) *pgerr.Error {
	e := pgerr.Newf(code, format, args...)
	e.Severity = pgerr.SeverityFatal
	return e
}

func newRef() string {
	var b [3]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout() || errors.Is(err, os.ErrDeadlineExceeded)
}

func quoteTyp(b byte) string { return strconv.QuoteRune(rune(b)) }

// scanCString splits a NUL-terminated string off b without allocating.
func scanCString(b []byte) (str, rest []byte, ok bool) {
	i := bytes.IndexByte(b, 0)
	if i < 0 {
		return nil, nil, false
	}
	return b[:i], b[i+1:], true
}

// scanParse checks a Parse body exactly as pgproto3's Parse.Decode does and
// returns its statement name and query without allocating.
func scanParse(body []byte) (name, query []byte, ok bool) {
	if name, body, ok = scanCString(body); !ok {
		return nil, nil, false
	}
	if query, body, ok = scanCString(body); !ok {
		return nil, nil, false
	}
	if len(body) < 2 {
		return nil, nil, false
	}
	if n := int(binary.BigEndian.Uint16(body)); len(body)-2 < 4*n {
		return nil, nil, false
	}
	return name, query, true
}

// scanBind checks a Bind body exactly as pgproto3's Bind.Decode does and
// returns its portal and statement names without allocating.
func scanBind(body []byte) (portal, stmt []byte, ok bool) {
	if portal, body, ok = scanCString(body); !ok {
		return nil, nil, false
	}
	if stmt, body, ok = scanCString(body); !ok {
		return nil, nil, false
	}
	if len(body) < 2 {
		return nil, nil, false
	}
	n := int(binary.BigEndian.Uint16(body))
	body = body[2:]
	if len(body) < 2*n {
		return nil, nil, false
	}
	body = body[2*n:]
	if len(body) < 2 {
		return nil, nil, false
	}
	n = int(binary.BigEndian.Uint16(body))
	body = body[2:]
	for range n {
		if len(body) < 4 {
			return nil, nil, false
		}
		sz := int(int32(binary.BigEndian.Uint32(body)))
		body = body[4:]
		if sz == -1 {
			continue
		}
		if sz < 0 || len(body) < sz {
			return nil, nil, false
		}
		body = body[sz:]
	}
	if len(body) < 2 {
		return nil, nil, false
	}
	n = int(binary.BigEndian.Uint16(body))
	if len(body)-2 < 2*n {
		return nil, nil, false
	}
	return portal, stmt, true
}
