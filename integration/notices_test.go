package integration

import (
	"slices"
	"testing"
)

// Notices name objects as surface §3.2 writes them: qualified, each part
// quoted only when PostgreSQL's quote_ident would quote it, whatever the
// statement (also in the lists of cascaded and released fields).
func TestNoticeNamesQuotedOnlyWhenNeeded(t *testing.T) {
	h := startTrellis(t)
	c := h.client(t)
	mustExec(t, c, `CREATE TABLE "Orders" (id bigint PRIMARY KEY, price numeric, qty int)`)
	mustExec(t, c, `INSERT INTO "Orders" SELECT g, g, g % 5 FROM generate_series(1, 50) g`)

	want := func(stmt, notice string) map[string]any {
		t.Helper()
		v, got := h.applied(t, stmt)
		if got != notice {
			t.Fatalf("%s:\n got notice %q\nwant        %q", stmt, got, notice)
		}
		return v
	}
	want(`TRANSFORM "Order View" FROM "Orders" SELECT price * 2 AS "Double Price", qty AS qty`,
		`transform public."Order View" defined; it is waiting_to_backfill and reads public."Orders"`)
	want(`TRANSFORM reader FROM "Order View" SELECT "Double Price" + 1 AS "select"`,
		`transform public.reader defined; it is waiting_to_backfill and reads public."Order View"`)
	h.waitStatus(t, `"Order View"`, "live")
	h.waitStatus(t, "reader", "live")

	want(`ALTER TRANSFORM "Order View" ADD qty * 10 AS "Qty Ten", ADD qty + 1 AS q1`,
		`transform public."Order View" altered: added "Qty Ten", q1; the changed columns are rebuilt in the background`)
	h.waitStatus(t, `"Order View"`, "live")
	want(`PAUSE TRANSFORM "Order View"."Double Price"`,
		`column "Double Price" of public."Order View" paused; it keeps its values until RESUME TRANSFORM "Order View"."Double Price"; fields reading it are paused too: reader."select"`)
	v := want(`RESUME TRANSFORM "Order View"."Double Price"`,
		`column "Double Price" of public."Order View" resumed; it is recomputed from public."Orders" in the background (the transform is backfilling until done); released with it: reader."select"`)
	// The resumed list holds addresses as a statement takes them back.
	if got := v["resumed"].([]string); !slices.Equal(got, []string{`"Order View"."Double Price"`, `reader."select"`}) {
		t.Fatalf("resumed %q", got)
	}
	h.waitStatus(t, `"Order View"`, "live")
	h.waitStatus(t, "reader", "live")

	want(`PAUSE TRANSFORM reader`,
		`transform public.reader paused; its rows stay as they are until RESUME TRANSFORM reader`)
	want(`DROP TRANSFORM reader`, `transform public.reader dropped with its table`)
	want(`PAUSE TRANSFORM "Order View"`,
		`transform public."Order View" paused; its rows stay as they are until RESUME TRANSFORM "Order View"`)
	want(`RESUME TRANSFORM "Order View"`,
		`transform public."Order View" resumed; it is waiting_to_backfill and will be rebuilt from public."Orders"`)
	h.waitStatus(t, `"Order View"`, "live")
	want(`PAUSE TRANSFORM "Order View"`,
		`transform public."Order View" paused; its rows stay as they are until RESUME TRANSFORM "Order View"`)
	v = want(`DROP TRANSFORM "Order View"`, `transform public."Order View" dropped with its table`)
	if v["target_table"] != `public."Order View"` {
		t.Fatalf("target_table %v", v["target_table"])
	}
	want(`DROP TRANSFORM "Order View"`, `transform "Order View" does not exist, skipping`)
}
