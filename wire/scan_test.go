package wire

import (
	"math/rand/v2"
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"
)

// The allocation-free checks must accept exactly what pgproto3's decoders
// accept (a frame they wrongly accept is forwarded instead of refused).
func TestScanMatchesPgproto3(t *testing.T) {
	var bodies [][]byte
	add := func(m interface{ Encode([]byte) ([]byte, error) }) {
		b, err := m.Encode(nil)
		if err != nil {
			t.Fatal(err)
		}
		bodies = append(bodies, b[5:])
	}
	add(&pgproto3.Parse{Name: "s1", Query: "select $1", ParameterOIDs: []uint32{23, 25}})
	add(&pgproto3.Parse{Query: "select 1"})
	add(&pgproto3.Bind{DestinationPortal: "p", PreparedStatement: "s1", ParameterFormatCodes: []int16{1},
		Parameters: [][]byte{[]byte("12345"), nil}, ResultFormatCodes: []int16{0, 1}})
	add(&pgproto3.Bind{})
	add(&pgproto3.Execute{Portal: "p", MaxRows: 7})
	rng := rand.New(rand.NewPCG(1, 2))
	check := func(body []byte) {
		var p pgproto3.Parse
		pe := p.Decode(body)
		name, query, ok := scanParse(body)
		if ok != (pe == nil) || ok && (string(name) != p.Name || string(query) != p.Query) {
			t.Fatalf("Parse %q: scan ok=%v, decode err=%v", body, ok, pe)
		}
		var b pgproto3.Bind
		be := b.Decode(body)
		portal, stmt, ok := scanBind(body)
		if ok != (be == nil) || ok && (string(portal) != b.DestinationPortal || string(stmt) != b.PreparedStatement) {
			t.Fatalf("Bind %q: scan ok=%v, decode err=%v", body, ok, be)
		}
	}
	for _, body := range bodies {
		for i := 0; i <= len(body); i++ {
			check(body[:i])
		}
		for range 2000 {
			m := append([]byte(nil), body...)
			for range 1 + rng.IntN(3) {
				if len(m) > 0 {
					m[rng.IntN(len(m))] = byte(rng.IntN(256))
				}
			}
			check(m[:rng.IntN(len(m)+1)])
			check(m)
		}
	}
}
