package wire

import (
	"bufio"
	"encoding/binary"
	"io"
	"log/slog"
	"net"
	"syscall"
	"testing"
	"time"
)

// Relay benchmarks: a byte-level fake upstream and client (pre-encoded
// frames, no decoding) so that the proxy's own cost dominates.
//
//	go test ./wire -run '^$' -bench Relay -cpuprofile cpu.out

func frame(typ byte, body []byte) []byte {
	return append(appendHeader(nil, typ, len(body)), body...)
}

// benchUpstream answers: Sync → an extended select reply; Query "big" →
// bigReply; Query "copy" → nothing until CopyDone, then C+Z.
func benchUpstream(b *testing.B, bigReply []byte) net.Listener {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	row := frame('D', append([]byte{0, 1, 0, 0, 0, 4}, "1234"...))
	ext := append(frame('1', nil), frame('2', nil)...)
	ext = append(ext, frame('T', append([]byte{0, 1}, "aid\x00\x00\x00\x40\x01\x00\x01\x00\x00\x00\x17\x00\x04\xff\xff\xff\xff\x00\x00"...))...)
	ext = append(ext, row...)
	ext = append(ext, frame('C', []byte("SELECT 1\x00"))...)
	ext = append(ext, frame('Z', []byte{'I'})...)
	copyDone := append(frame('C', []byte("COPY 1\x00")), frame('Z', []byte{'I'})...)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReaderSize(c, 64<<10)
				var l [4]byte
				io.ReadFull(br, l[:])
				br.Discard(int(binary.BigEndian.Uint32(l[:])) - 4)
				var hello []byte
				hello = append(hello, frame('R', []byte{0, 0, 0, 0})...)
				hello = append(hello, frame('K', []byte{0, 0, 1, 2, 1, 2, 3, 4})...)
				hello = append(hello, frame('Z', []byte{'I'})...)
				c.Write(hello)
				for {
					h, err := br.Peek(5)
					if err != nil {
						return
					}
					typ, n := h[0], int(binary.BigEndian.Uint32(h[1:]))-4
					br.Discard(5)
					switch typ {
					case 'S':
						c.Write(ext)
					case 'Q':
						q, _ := br.Peek(1)
						if q[0] == 'b' {
							c.Write(bigReply)
						}
					case 'c':
						c.Write(copyDone)
					case 'X':
						return
					}
					if _, err := br.Discard(n); err != nil {
						return
					}
				}
			}()
		}
	}()
	b.Cleanup(func() { ln.Close() })
	return ln
}

// benchClient connects through the proxy and completes startup.
func benchClient(b *testing.B, addr string) (net.Conn, *zReader) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	body := binary.BigEndian.AppendUint32(nil, 3<<16)
	body = append(body, "user\x00bench\x00\x00"...)
	c.Write(append(binary.BigEndian.AppendUint32(nil, uint32(len(body)+4)), body...))
	z := &zReader{r: c, buf: make([]byte, 256<<10)}
	if err := z.untilZ(1); err != nil {
		b.Fatal(err)
	}
	return c, z
}

// zReader reads a frame stream and counts ReadyForQuery frames, skipping
// bodies without decoding them.
type zReader struct {
	r       io.Reader
	buf     []byte
	skip    int // body bytes of the current frame still to skip
	hdr     [5]byte
	hn      int
	n       int64
	errSeen bool
}

func (z *zReader) untilZ(want int) error {
	for want > 0 {
		m, err := z.r.Read(z.buf)
		if err != nil {
			return err
		}
		z.n += int64(m)
		p := z.buf[:m]
		for len(p) > 0 {
			if z.skip > 0 {
				k := min(z.skip, len(p))
				z.skip -= k
				p = p[k:]
				continue
			}
			k := copy(z.hdr[z.hn:], p)
			z.hn += k
			p = p[k:]
			if z.hn < 5 {
				continue
			}
			z.hn = 0
			z.skip = int(binary.BigEndian.Uint32(z.hdr[1:])) - 4
			switch z.hdr[0] {
			case 'Z':
				want--
			case 'E':
				z.errSeen = true
			}
		}
	}
	return nil
}

type benchInterceptor struct{ PassThrough }

func (benchInterceptor) Classify(*SessionInfo, string) Route { return PassThroughRoute }

func benchProxy(b *testing.B, up net.Listener, intercept bool) string {
	cfg := Config{Upstream: UpstreamConfig{Network: "tcp", Address: up.Addr().String(), SSLMode: "disable"},
		Logger: slog.New(slog.DiscardHandler), AuthTimeout: 5 * time.Second}
	if intercept {
		cfg.Interceptor = benchInterceptor{}
	}
	s, err := NewServer(cfg)
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go s.Serve(ln)
	b.Cleanup(func() { s.Close(); s.Wait() })
	return ln.Addr().String()
}

// extendedBatch is what pgbench -S -M extended sends per transaction.
func extendedBatch() []byte {
	var m []byte
	m = append(m, frame('P', []byte("\x00SELECT abalance FROM pgbench_accounts WHERE aid = $1;\x00\x00\x00"))...)
	m = append(m, frame('B', []byte("\x00\x00\x00\x00\x00\x01\x00\x00\x00\x0512345\x00\x00"))...)
	m = append(m, frame('D', []byte("P\x00"))...)
	m = append(m, frame('E', []byte("\x00\x00\x00\x00\x00"))...)
	m = append(m, frame('S', nil)...)
	return m
}

func benchExtended(b *testing.B, intercept bool, clients int) {
	up := benchUpstream(b, nil)
	addr := benchProxy(b, up, intercept)
	batch := extendedBatch()
	b.SetParallelism(1)
	type cl struct {
		c net.Conn
		z *zReader
	}
	ch := make(chan cl, clients)
	for range clients {
		c, z := benchClient(b, addr)
		defer c.Close()
		ch <- cl{c, z}
	}
	b.ResetTimer()
	defer cpuMeter(b)()
	b.RunParallel(func(pb *testing.PB) {
		x := <-ch
		for pb.Next() {
			x.c.Write(batch)
			if err := x.z.untilZ(1); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func BenchmarkRelayExtendedPassThrough(b *testing.B) { benchExtended(b, false, 8) }
func BenchmarkRelayExtendedIntercept(b *testing.B)   { benchExtended(b, true, 8) }

func BenchmarkRelayBigResult(b *testing.B) {
	var big []byte
	val := make([]byte, 1000)
	for i := range val {
		val[i] = 'x'
	}
	rowBody := append([]byte{0, 1, 0, 0, 0x03, 0xe8}, val...)
	for range 10000 {
		big = append(big, frame('D', rowBody)...)
	}
	big = append(big, frame('C', []byte("SELECT 10000\x00"))...)
	big = append(big, frame('Z', []byte{'I'})...)
	up := benchUpstream(b, big)
	addr := benchProxy(b, up, true)
	c, z := benchClient(b, addr)
	defer c.Close()
	q := frame('Q', []byte("big\x00"))
	b.SetBytes(int64(len(big)))
	defer cpuMeter(b)()
	for b.Loop() {
		c.Write(q)
		if err := z.untilZ(1); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRelayCopyIn(b *testing.B) {
	up := benchUpstream(b, nil)
	addr := benchProxy(b, up, true)
	c, z := benchClient(b, addr)
	defer c.Close()
	// pgx's CopyFrom sends 64 KiB CopyData frames.
	var stream []byte
	stream = append(stream, frame('Q', []byte("copy\x00"))...)
	chunk := make([]byte, 65536-5)
	for i := range chunk {
		chunk[i] = 'y'
	}
	for range 160 {
		stream = append(stream, frame('d', chunk)...)
	}
	stream = append(stream, frame('c', nil)...)
	b.SetBytes(int64(len(stream)))
	defer cpuMeter(b)()
	for b.Loop() {
		go c.Write(stream)
		if err := z.untilZ(1); err != nil {
			b.Fatal(err)
		}
	}
}

// cpuMeter reports the process's CPU time (user+system) per op: on a shared,
// noisy machine it moves far less than wall time. The fake client and
// upstream are the same for every version of the proxy.
func cpuMeter(b *testing.B) func() {
	var r0 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &r0)
	return func() {
		var r1 syscall.Rusage
		syscall.Getrusage(syscall.RUSAGE_SELF, &r1)
		ns := (r1.Utime.Nano() + r1.Stime.Nano()) - (r0.Utime.Nano() + r0.Stime.Nano())
		b.ReportMetric(float64(ns)/float64(b.N), "cpu-ns/op")
	}
}
