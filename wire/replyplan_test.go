package wire

import (
	"bufio"
	"encoding/binary"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
)

// FuzzReplyPlan pipelines random sequences of upstream and local units in
// one write and checks that every reply comes back whole and in order.
func FuzzReplyPlan(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5})
	f.Add([]byte{1, 1, 1, 0, 0, 3, 3, 2, 5, 4})
	f.Add([]byte{5, 0, 5, 1, 5, 2, 5, 3})
	up := newFakeUpstream(f, nil)
	srv := testServer(f, up, func(c *Config) { c.Interceptor = fuzzInterceptor{} })
	addr := serveLoopback(f, srv)
	f.Fuzz(func(t *testing.T, ops []byte) { runPlanOps(t, addr, ops) })
}

func runPlanOps(t *testing.T, addr string, ops []byte) {
	{
		if len(ops) > 64 {
			ops = ops[:64]
		}
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(20 * time.Second))
		var out []byte
		out = append(out, startupBytes()...)
		var want strings.Builder
		enc := func(msgs ...pgproto3.FrontendMessage) {
			for _, m := range msgs {
				out, _ = m.Encode(out)
			}
		}
		zs := 1 // the startup's
		for _, op := range ops {
			switch op % 6 {
			case 0: // upstream simple query: the fake answers C Z
				enc(&pgproto3.Query{String: "select 1"})
				want.WriteString("CZ")
			case 1: // local simple query
				enc(&pgproto3.Query{String: "local"})
				want.WriteString("TDCZ")
			case 2: // upstream extended batch: the fake answers only the Sync
				enc(&pgproto3.Parse{Query: "select 1"}, &pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Sync{})
				want.WriteString("Z")
			case 3: // local extended batch
				enc(&pgproto3.Parse{Query: "local"}, &pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Sync{})
				want.WriteString("12DCZ")
			case 4: // a local unit forwarding a piece upstream
				enc(&pgproto3.Query{String: "local forward"})
				want.WriteString("CZ")
			case 5: // a mixed batch: the fake answers the proxy's Sync that
				// settles the ordinary Parse, then the local Parse is answered
				enc(&pgproto3.Parse{Query: "select 1"}, &pgproto3.Parse{Query: "local"}, &pgproto3.Sync{})
				want.WriteString("1Z")
			}
			zs++
		}
		out = append(out, 'X', 0, 0, 0, 4)
		go c.Write(out)
		br := bufio.NewReader(c)
		var got strings.Builder
		for seen := 0; seen < zs; {
			var h [5]byte
			if _, err := io.ReadFull(br, h[:]); err != nil {
				t.Fatalf("after %q: %v", got.String(), err)
			}
			if _, err := br.Discard(int(binary.BigEndian.Uint32(h[1:])) - 4); err != nil {
				t.Fatal(err)
			}
			if seen == 0 { // startup: skip to its ReadyForQuery
				if h[0] == 'Z' {
					seen++
				}
				continue
			}
			got.WriteByte(h[0])
			if h[0] == 'Z' {
				seen++
			}
		}
		if got.String() != want.String() {
			t.Fatalf("ops %v:\ngot  %s\nwant %s", ops, got.String(), want.String())
		}
	}
}
