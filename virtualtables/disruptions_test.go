package virtualtables

import (
	"testing"
	"time"

	"github.com/trellis-proxy/trellis-proxy/engine"
)

// trellis.capture_disruptions lists a captured table that joined an
// inheritance hierarchy (a fault the staging worker cannot repair: it
// pauses the readers instead), with the transforms affected.
func TestCaptureDisruptionsListsHierarchy(t *testing.T) {
	_, pool := testDB(t)
	e, run := newEngine(t, pool, fastConfig("trellis"))
	exec(t, pool, `CREATE TABLE s (id int PRIMARY KEY, a int)`)
	define(t, e, pool, engine.Spec{Target: engine.TableName{Schema: "public", Name: "s_v"}, Source: engine.TableName{Schema: "public", Name: "s"},
		Statement: `TRANSFORM "public"."s_v" FROM "public"."s" SELECT "a" AS "a2"`,
		Fields:    []engine.Field{{Name: "a2", Expr: engine.SourceColumn("a"), Reads: []string{"a"}}}})
	run()
	waitStatus(t, pool, "trellis", "s_v", "live")
	if got := queryStrings(t, pool, `SELECT count(*)::text FROM trellis.capture_disruptions`); got[0] != "0" {
		t.Fatalf("disruptions on healthy capture: %v", queryStrings(t, pool, `SELECT fault || ': ' || detail FROM trellis.capture_disruptions`))
	}
	exec(t, pool, `CREATE TABLE s_child () INHERITS (s)`)
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := queryStrings(t, pool, `SELECT table_name || ' ' || fault || ' ' || array_to_string(definitions, ',') FROM trellis.detect_capture_disruptions()`)
		if len(got) == 1 && got[0] == "public.s in_hierarchy s_v" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("capture_disruptions = %v", got)
		}
		time.Sleep(20 * time.Millisecond)
	}
	waitStatus(t, pool, "trellis", "s_v", "paused")
}
