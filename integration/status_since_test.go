package integration

import (
	"testing"
	"time"
)

// TestSCDrainFailureSince: status.drain_failure carries since (when the
// failing run of pages began) and last_seen (its latest failure), and
// clears once a page commits.
func TestSCDrainFailureSince(t *testing.T) {
	h := startTrellisFaults(t)
	c := h.client(t)
	mustExec(t, c, `CREATE TABLE sc_df (id bigint PRIMARY KEY, v int)`)
	mustExec(t, c, `INSERT INTO sc_df SELECT g, g FROM generate_series(1, 5) g`)
	mustExec(t, c, `TRANSFORM sc_df_x FROM sc_df SELECT v * 2 AS x`)
	h.waitStatus(t, "sc_df_x", "live")
	mustExec(t, c, `CREATE FUNCTION sc_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'sc_df_x under maintenance' USING ERRCODE = '55006'; END $$`)
	mustExec(t, c, `CREATE TRIGGER sc_refuse BEFORE UPDATE ON sc_df_x FOR EACH ROW EXECUTE FUNCTION sc_refuse()`)
	mustExec(t, c, `UPDATE sc_df SET v = v + 1 WHERE id = 3`)
	var first string
	eventually(t, 60*time.Second, "drain_failure with since and last_seen", func() bool {
		first = qString(t, c, `SELECT coalesce(drain_failure ->> 'since', '') FROM trellis.status WHERE target = 'sc_df_x'`)
		return first != ""
	})
	// The run goes on: since stays, last_seen moves past it.
	eventually(t, 60*time.Second, "last_seen after since", func() bool {
		return qString(t, c, `SELECT (drain_failure ->> 'since' = $1 AND drain_failure ->> 'last_seen' > $1)::text
			FROM trellis.status WHERE target = 'sc_df_x'`, first) == "true"
	})
	mustExec(t, c, `DROP TRIGGER sc_refuse ON sc_df_x`)
	eventually(t, 60*time.Second, "drain_failure cleared", func() bool {
		return qString(t, c, `SELECT (drain_failure IS NULL)::text FROM trellis.status WHERE target = 'sc_df_x'`) == "true"
	})
}
