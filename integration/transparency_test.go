package integration

import (
	"bytes"
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/trellis-proxy/trellis-proxy/internal/pgcluster"
)

// TestTransparency runs one script directly and through the proxy and
// requires identical server frames, except BackendKeyData (D1, D4).
func TestTransparency(t *testing.T) {
	h := start(t, nil)
	script := func(addr string) []frame {
		r := dialRaw(t, addr)
		out := r.startup()
		q := func(sql string) {
			r.sendMsgs(&pgproto3.Query{String: sql})
			out = append(out, r.untilZ()...)
		}
		q("select 1 as a, 'x'::text as b, null::int as c, 1.5::numeric as d")
		q("select 1/0")
		q("")
		q("do $$ begin raise notice 'hello %', 42; end $$")
		q("set application_name = 'diff'")
		q("select 1; select 2; select 3 union all select 4")
		q("copy (select i, md5(i::text) from generate_series(1, 500) i) to stdout")
		q("begin; create temp table d(x int); insert into d values (1),(2); select x + 0 as x from d")
		q("select nope")
		q("rollback")
		q("select repeat('z', 300000)")
		q("select * from pg_type where false")
		r.sendMsgs(&pgproto3.Parse{Name: "s", Query: "select $1::int + 1, $2::text", ParameterOIDs: []uint32{23, 25}},
			&pgproto3.Describe{ObjectType: 'S', Name: "s"},
			&pgproto3.Bind{PreparedStatement: "s", Parameters: [][]byte{[]byte("41"), []byte("t")}, ResultFormatCodes: []int16{1, 0}},
			&pgproto3.Describe{ObjectType: 'P'}, &pgproto3.Execute{}, &pgproto3.Close{ObjectType: 'S', Name: "s"}, &pgproto3.Sync{},
			&pgproto3.Sync{})
		out = append(out, r.untilZs(2)...)
		q("create temp table ci(x int, y text)")
		r.sendMsgs(&pgproto3.Query{String: "copy ci from stdin"})
		for {
			f, err := r.next()
			if err != nil {
				t.Fatalf("%s: %v after %s", addr, err, types(out))
			}
			out = append(out, f)
			if f.typ == 'G' {
				break
			}
		}
		r.sendMsgs(&pgproto3.CopyData{Data: []byte("1\tone\n2\ttwo\n")}, &pgproto3.CopyData{Data: []byte("3\tthree\n")}, &pgproto3.CopyDone{})
		out = append(out, r.untilZ()...)
		r.sendMsgs(&pgproto3.Query{String: "copy ci from stdin"})
		out = append(out, r.next1()) // G, then fail it
		r.sendMsgs(&pgproto3.CopyFail{Message: "client gave up"})
		out = append(out, r.untilZ()...)
		q("select x + 0 as x, y || '' as y from ci order by x")
		r.sendMsgs(&pgproto3.Terminate{})
		return out
	}
	direct := script(pgcluster.ForTest(t).Addr())
	proxied := script(h.Addr)
	if len(direct) != len(proxied) {
		t.Fatalf("%d frames directly, %d through the proxy:\n%s\n%s", len(direct), len(proxied), types(direct), types(proxied))
	}
	for i := range direct {
		d, p := direct[i], proxied[i]
		if d.typ == 'K' && p.typ == 'K' {
			if bytes.Equal(d.body, p.body) {
				t.Error("BackendKeyData was not replaced")
			}
			continue
		}
		if d.typ != p.typ || !bytes.Equal(d.body, p.body) {
			t.Fatalf("frame %d differs:\ndirect %v\nproxy  %v", i, d, p)
		}
	}
}

// next1 reads one frame, failing the test on error.
func (r *rawConn) next1() frame {
	r.t.Helper()
	f, err := r.next()
	if err != nil {
		r.t.Fatal(err)
	}
	return f
}
