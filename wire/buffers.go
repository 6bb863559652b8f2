package wire

import (
	"encoding/binary"
	"errors"
	"io"
	"sync"
	"syscall"
)

// Buffer sizes. A direction takes a pooled 8 KiB buffer only while it has
// bytes to hold: the reader gives its buffer back each time it finds the
// socket empty and waits, the writer each time it flushes, so an idle
// session holds none (the idle-memory goal). A direction that streams (a
// large result, COPY) takes 128 KiB buffers instead, which cut its read and
// write syscalls by up to 16x, until its reply or copy is over.
const (
	smallBuf = 8 << 10
	bigBuf   = 128 << 10
	// growAfter is how many bytes one reply (server→client) or one
	// statement's input (client→server) relays before the direction counts
	// as streaming; ordinary OLTP replies stay well below it.
	growAfter = 64 << 10
)

var (
	smallBufs = sync.Pool{New: func() any { b := make([]byte, smallBuf); return &b }}
	bigBufs   = sync.Pool{New: func() any { b := make([]byte, bigBuf); return &b }}
)

// getBuf takes a buffer from its pool. The pools hold *[]byte, so that
// putting one back allocates nothing; the caller keeps the pointer.
func getBuf(big bool) *[]byte {
	if big {
		return bigBufs.Get().(*[]byte)
	}
	return smallBufs.Get().(*[]byte)
}

func putBuf(p *[]byte) {
	switch cap(*p) {
	case bigBuf:
		bigBufs.Put(p)
	case smallBuf:
		smallBufs.Put(p)
	}
}

// errBufferFull is bufio's: Peek of more than the buffer holds.
var errBufferFull = errors.New("wire: buffer full")

// connReader is the subset of bufio.Reader the pumps use (Peek, Discard,
// Buffered, Read), over a buffer taken from a pool. On a socket that
// exposes its descriptor it reads through syscall.RawConn, so the read
// that finds the socket empty (EAGAIN, just before the goroutine parks) is
// where an empty buffer goes back to the pool and the wake-up is where one
// is taken again: an idle session holds no read buffer, at no extra
// syscall. Slices returned by Peek are valid until the next read call, as
// with bufio (and a buffer given back is another session's next).
type connReader struct {
	rd     io.Reader
	raw    syscall.RawConn // nil: read through rd, keeping the buffer
	buf    []byte
	hold   *[]byte // buf's pool handle
	r, w   int
	err    error
	big    bool // streaming: take big buffers
	readFn func(fd uintptr) bool
	// results of readFn
	n    int
	rerr error
}

func newConnReader(rd io.Reader) *connReader {
	cr := &connReader{rd: rd}
	if sc, ok := rd.(syscall.Conn); ok {
		if raw, err := sc.SyscallConn(); err == nil {
			cr.raw = raw
		}
	}
	cr.readFn = cr.readFd
	return cr
}

// Buffered is the number of bytes that can be read without a syscall.
func (b *connReader) Buffered() int { return b.w - b.r }

// Size is the size of the buffer the next fill will use.
func (b *connReader) Size() int {
	if b.big {
		return bigBuf
	}
	return smallBuf
}

// grow makes the reader take big buffers from now on.
func (b *connReader) grow() {
	if b.big {
		return
	}
	b.big = true
	if b.buf != nil && b.r == b.w {
		b.release()
	}
}

// shrink makes the reader take small buffers again once it is empty.
func (b *connReader) shrink() {
	if !b.big {
		return
	}
	b.big = false
	if b.buf != nil && b.r == b.w {
		b.release()
	}
}

func (b *connReader) take() {
	b.hold = getBuf(b.big)
	b.buf = *b.hold
}

func (b *connReader) release() {
	putBuf(b.hold)
	b.buf, b.hold, b.r, b.w = nil, nil, 0, 0
}

func (b *connReader) readErr() error {
	err := b.err
	b.err = nil
	return err
}

// readFd is readFn: one read into the buffer; on EAGAIN an empty buffer is
// given back before the goroutine waits, and taken again when it wakes.
func (b *connReader) readFd(fd uintptr) bool {
	if b.buf == nil {
		b.take()
	}
	for {
		n, err := syscall.Read(int(fd), b.buf[b.w:])
		switch err {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			if b.r == b.w {
				b.release()
			}
			return false
		}
		b.n, b.rerr = n, err
		if err == nil && n == 0 {
			b.rerr = io.EOF
		}
		if n < 0 {
			b.n = 0
		}
		return true
	}
}

// fill reads once into the free part of the buffer.
func (b *connReader) fill() {
	if b.r > 0 {
		copy(b.buf, b.buf[b.r:b.w])
		b.w -= b.r
		b.r = 0
	}
	if b.raw != nil {
		b.n, b.rerr = 0, nil
		if err := b.raw.Read(b.readFn); err != nil {
			b.err = err
			return
		}
		b.w += b.n
		b.err = b.rerr
		return
	}
	if b.buf == nil {
		b.take()
	}
	for range 100 {
		n, err := b.rd.Read(b.buf[b.w:])
		b.w += n
		if err != nil {
			b.err = err
			return
		}
		if n > 0 {
			return
		}
	}
	b.err = io.ErrNoProgress
}

// Peek returns the next n bytes without consuming them.
func (b *connReader) Peek(n int) ([]byte, error) {
	if n > b.Size() || b.buf != nil && n > len(b.buf) {
		return b.buf[b.r:b.w], errBufferFull
	}
	for b.w-b.r < n && b.err == nil {
		if b.buf != nil && len(b.buf)-b.r < n {
			// Slide now, so fill reads into room for n.
			copy(b.buf, b.buf[b.r:b.w])
			b.w -= b.r
			b.r = 0
		}
		b.fill()
	}
	if avail := b.w - b.r; avail < n {
		err := b.readErr()
		if err == nil {
			err = errBufferFull
		}
		return b.buf[b.r:b.w], err
	}
	return b.buf[b.r : b.r+n], nil
}

// Discard skips the next n bytes, reading as needed.
func (b *connReader) Discard(n int) (int, error) {
	done := 0
	for {
		k := min(b.w-b.r, n-done)
		b.r += k
		done += k
		if b.r == b.w {
			b.r, b.w = 0, 0
		}
		if done == n {
			return done, nil
		}
		b.fill()
		if b.err != nil && b.w == b.r {
			return done, b.readErr()
		}
	}
}

// Read reads into p from the buffer, or with at most one read.
func (b *connReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		if b.Buffered() > 0 {
			return 0, nil
		}
		return 0, b.readErr()
	}
	if b.r == b.w {
		if b.err != nil {
			return 0, b.readErr()
		}
		b.r, b.w = 0, 0
		b.fill()
		if b.r == b.w {
			return 0, b.readErr()
		}
	}
	n := copy(p, b.buf[b.r:b.w])
	b.r += n
	if b.r == b.w {
		b.r, b.w = 0, 0
	}
	return n, nil
}

// connWriter is the subset of bufio.Writer the pumps use (Write, Flush)
// over a pooled buffer taken at the first buffered byte and given back at
// every Flush, so a session between statements holds no write buffer.
// Errors are sticky, as bufio's.
type connWriter struct {
	wr   io.Writer
	buf  []byte  // nil, or a pooled buffer; len is what is buffered
	hold *[]byte // buf's pool handle
	err  error
	big  bool
}

func newConnWriter(w io.Writer) *connWriter { return &connWriter{wr: w} }

func (b *connWriter) size() int {
	if b.big {
		return bigBuf
	}
	return smallBuf
}

// Write buffers p; a write larger than the free room goes out directly
// when nothing is buffered, as bufio does.
func (b *connWriter) Write(p []byte) (int, error) {
	nn := 0
	for len(p) > b.size()-len(b.buf) && b.err == nil {
		var n int
		if len(b.buf) == 0 {
			n, b.err = b.wr.Write(p)
			if b.err == nil && n < len(p) {
				b.err = io.ErrShortWrite
			}
		} else {
			n = b.size() - len(b.buf)
			b.buf = append(b.buf, p[:n]...)
			b.Flush()
		}
		nn += n
		p = p[n:]
	}
	if b.err != nil {
		return nn, b.err
	}
	if len(p) > 0 {
		if b.buf == nil {
			b.hold = getBuf(b.big)
			b.buf = (*b.hold)[:0]
		}
		b.buf = append(b.buf, p...)
	}
	return nn + len(p), nil
}

// Flush writes what is buffered and gives the buffer back.
func (b *connWriter) Flush() error {
	if b.err != nil {
		return b.err
	}
	if b.buf == nil {
		return nil
	}
	if len(b.buf) > 0 {
		n, err := b.wr.Write(b.buf)
		if err == nil && n < len(b.buf) {
			err = io.ErrShortWrite
		}
		if err != nil {
			if n > 0 && n < len(b.buf) {
				copy(b.buf, b.buf[n:])
			}
			b.buf = b.buf[:len(b.buf)-n]
			b.err = err
			return err
		}
	}
	putBuf(b.hold)
	b.buf, b.hold = nil, nil
	return nil
}

// grow flushes and makes the writer take big buffers.
func (b *connWriter) grow() error {
	if b.big {
		return nil
	}
	if err := b.Flush(); err != nil {
		return err
	}
	b.big = true
	return nil
}

// shrink flushes and makes the writer take small buffers again.
func (b *connWriter) shrink() error {
	if !b.big {
		return nil
	}
	if err := b.Flush(); err != nil {
		return err
	}
	b.big = false
	return nil
}

// scanPassive returns the length of the longest prefix of buf made of whole
// server frames that are relayed without being looked at (every type but
// those serverToClient inspects), and how many frames that is.
func scanPassive(buf []byte, max int) (n, msgs int) {
	for len(buf)-n >= 5 {
		switch buf[n] {
		case 'Z', 'S', 'E', 'K':
			return n, msgs
		}
		l := int64(binary.BigEndian.Uint32(buf[n+1:]))
		if l < 4 || l-4 > int64(max) || int64(len(buf)-n-1) < l {
			return n, msgs
		}
		n += 1 + int(l)
		msgs++
	}
	return n, msgs
}
