package wire

import (
	"bufio"
	"encoding/binary"
	"io"
	"sync"
)

// Buffer sizes. Idle sessions keep 8 KiB buffers (the idle-memory goal); a
// direction that streams (a large result, COPY) switches to pooled 128 KiB
// buffers, which cut its read and write syscalls by up to 16x, and gives
// them back when its reply or copy is over.
const (
	smallBuf = 8 << 10
	bigBuf   = 128 << 10
	// growAfter is how many bytes one reply (server→client) or one
	// statement's input (client→server) relays before the direction counts
	// as streaming; ordinary OLTP replies stay well below it.
	growAfter = 64 << 10
)

var (
	bigReaders = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, bigBuf) }}
	bigWriters = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, bigBuf) }}
)

// growReader swaps *r for a pooled big reader on conn. Only an empty reader
// is swapped, so no byte is lost or reordered.
func growReader(r **bufio.Reader, conn io.Reader) {
	if (*r).Buffered() != 0 || (*r).Size() >= bigBuf {
		return
	}
	br := bigReaders.Get().(*bufio.Reader)
	br.Reset(conn)
	*r = br
}

// shrinkReader returns a big reader to the pool and puts back small.
func shrinkReader(r **bufio.Reader, small *bufio.Reader) {
	if *r == small || (*r).Buffered() != 0 {
		return
	}
	big := *r
	*r = small
	big.Reset(nil)
	bigReaders.Put(big)
}

// growWriter flushes *w and swaps it for a pooled big writer on conn.
func growWriter(w **bufio.Writer, conn io.Writer) error {
	if (*w).Size() >= bigBuf {
		return nil
	}
	if err := (*w).Flush(); err != nil {
		return err
	}
	bw := bigWriters.Get().(*bufio.Writer)
	bw.Reset(conn)
	*w = bw
	return nil
}

// shrinkWriter flushes a big writer, returns it to the pool and puts back
// small.
func shrinkWriter(w **bufio.Writer, small *bufio.Writer) error {
	if *w == small {
		return nil
	}
	if err := (*w).Flush(); err != nil {
		return err
	}
	big := *w
	*w = small
	big.Reset(nil)
	bigWriters.Put(big)
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
