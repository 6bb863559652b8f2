package sqlgen

import (
	"strings"
	"testing"

	"github.com/trellis-proxy/trellis-proxy/engine/model"
)

func TestCaptureDDL(t *testing.T) {
	in := Instance{Schema: "trellis", Worker: "w"}
	p := in.NewCapturePlan(`"public"."s"`, []model.KeyCol{{Name: "id", Type: "bigint", FullType: "bigint"}}, false)
	p.KeyTypes = []uint32{20}
	ddl := in.CaptureDDL(p)
	// Per event: the function, its REVOKE, the trigger, ENABLE ALWAYS.
	if len(ddl) != 4*len(CaptureEvents) {
		t.Fatalf("%d statements", len(ddl))
	}
	for i, ev := range CaptureEvents {
		fn := ddl[4*i]
		if !strings.HasPrefix(fn, "CREATE OR REPLACE FUNCTION "+in.CapFunc(p.Table, ev)+"()") {
			t.Errorf("%s: %.80s", ev, fn)
		}
		// A bigint key's rendering reads no output setting.
		if strings.Contains(fn, "SET datestyle") {
			t.Errorf("%s pins settings a bigint key does not read", ev)
		}
		if guarded := strings.Contains(fn, "'schema'"); guarded != (ev != "truncate") {
			t.Errorf("%s: key guard present = %v", ev, guarded)
		}
		if !strings.Contains(ddl[4*i+3], "ENABLE ALWAYS TRIGGER") {
			t.Errorf("%s: trigger not enabled always: %s", ev, ddl[4*i+3])
		}
	}
	// A key type not known to be setting-free gets every pin.
	q := in.NewCapturePlan(`"public"."s"`, []model.KeyCol{{Name: "d", Type: "public.dom", FullType: "public.dom"}}, false)
	q.KeyTypes = []uint32{99999}
	if fn := in.CaptureDDL(q)[0]; !strings.Contains(fn, "SET datestyle = 'ISO, YMD' SET timezone = 'UTC'") {
		t.Errorf("unknown key type not pinned: %.300s", fn)
	}
	if p.Hash == q.Hash || p.Hash != in.NewCapturePlan(`"public"."s"`, p.Key, false).Hash {
		t.Error("the plan hash does not follow the key")
	}
}

func TestTriggerNameFitsAnIdentifier(t *testing.T) {
	if got := (Instance{Schema: "trellis"}).TriggerName("insert"); got != "trellis_capture_insert" {
		t.Fatalf("TriggerName = %q", got)
	}
	long := Instance{Schema: strings.Repeat("s", 60)}
	if n := long.TriggerName("truncate"); len(n) > 63 || !strings.HasSuffix(n, "_capture_truncate") {
		t.Fatalf("TriggerName = %q (%d bytes)", n, len(n))
	}
}

func TestPinOutputs(t *testing.T) {
	if got := PinOutputs(); !strings.HasPrefix(got, "SET LOCAL datestyle = 'ISO, YMD'; SET LOCAL timezone = 'UTC'") {
		t.Fatalf("PinOutputs = %s", got)
	}
}

// A table a JOIN target joins on another unique key also logs that key's
// values, under its alternate log name, guarded like the identity; the
// hash follows the alternate keys.
func TestCaptureDDLAlternateKeys(t *testing.T) {
	in := Instance{Schema: "trellis", Worker: "w"}
	p := in.NewCapturePlan(`public.products`, []model.KeyCol{{Name: "id", Type: "integer", FullType: "integer"}}, false)
	plain := p.Hash
	p.AddAlt([]model.KeyCol{{Name: "sku", Type: "text", FullType: "text"}}, in)
	p.AddAlt([]model.KeyCol{{Name: "sku", Type: "text", FullType: "text"}}, in) // once
	if len(p.Alt) != 1 || p.Alt[0].Table != `public.products#("sku")` || p.Hash == plain {
		t.Fatalf("alt %+v hash %s (plain %s)", p.Alt, p.Hash, plain)
	}
	p.KeyTypes, p.AltTypes = []uint32{23}, []uint32{25}
	ddl := in.CaptureDDL(p)
	for i, ev := range CaptureEvents {
		fn := ddl[4*i]
		logs := strings.Contains(fn, `'public.products#("sku")'`)
		if logs != (ev != "truncate") {
			t.Errorf("%s: alternate key logged = %v", ev, logs)
		}
		if ev != "truncate" && !strings.Contains(fn, `attname IN ('id', 'sku')`) {
			t.Errorf("%s: the guard does not check the alternate key's column: %.600s", ev, fn)
		}
	}
	if upd := ddl[4]; !strings.Contains(upd, "FROM trellis_old x UNION ALL SELECT") {
		t.Errorf("update logs old and new values: %s", upd)
	}
}
