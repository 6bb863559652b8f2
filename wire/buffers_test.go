package wire

import (
	"bytes"
	"io"
	"math/rand/v2"
	"net"
	"testing"
)

// connReader over a real socket (the RawConn path that gives its buffer
// back whenever the socket is empty) and connWriter deliver exactly the
// byte stream, frame by frame, whatever the write sizes, across small and
// big buffers.
func TestConnReaderWriterStream(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	var frames [][]byte
	var stream []byte
	for i := range 400 {
		n := rng.IntN(300)
		if i%50 == 0 {
			n = 20000 + rng.IntN(200000) // larger than a small buffer
		}
		body := make([]byte, n)
		for j := range body {
			body[j] = byte(rng.Uint32())
		}
		frames = append(frames, body)
		stream = append(stream, frame('D', body)...)
	}
	go func() {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			return
		}
		defer c.Close()
		w := newConnWriter(c)
		rest := stream
		for k := 0; len(rest) > 0; k++ {
			n := min(len(rest), 1+rng.IntN(40000))
			if k%7 == 0 {
				w.grow()
			} else if k%5 == 0 {
				w.shrink()
			}
			if _, err := w.Write(rest[:n]); err != nil {
				return
			}
			rest = rest[n:]
			if k%3 == 0 && w.Flush() != nil {
				return
			}
		}
		w.Flush()
	}()
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := newConnReader(c)
	if r.raw == nil {
		t.Fatal("a TCP connection should be read through its RawConn")
	}
	var body []byte
	for i, want := range frames {
		if i%9 == 0 {
			r.grow()
		} else if i%4 == 0 && r.Buffered() == 0 {
			r.shrink()
		}
		typ, n, err := peekHeader(r, 1<<20)
		if err != nil || typ != 'D' || n != len(want) {
			t.Fatalf("frame %d: header %q %d %v, want 'D' %d", i, typ, n, err, len(want))
		}
		switch i % 4 {
		case 0:
			body, err = readBody(r, body, n)
		case 1: // the streaming path: Peek and Discard from the buffer
			body = body[:0]
			for left := n; left > 0 && err == nil; {
				if r.Buffered() == 0 {
					_, err = r.Peek(1)
					continue
				}
				p, _ := r.Peek(min(left, r.Buffered()))
				body = append(body, p...)
				r.Discard(len(p))
				left -= len(p)
			}
		case 3: // skipped whole: the next header must still be in place
			var k int
			k, err = r.Discard(n)
			body = want
			if k != n {
				t.Fatalf("frame %d: discarded %d of %d", i, k, n)
			}
		case 2:
			var b bytes.Buffer
			_, err = io.CopyN(&b, r, int64(n))
			body = b.Bytes()
		}
		if err != nil || !bytes.Equal(body, want) {
			t.Fatalf("frame %d: body differs (%v)", i, err)
		}
	}
	if _, err := r.Peek(1); err != io.EOF {
		t.Fatalf("after the stream: %v, want EOF", err)
	}
}
