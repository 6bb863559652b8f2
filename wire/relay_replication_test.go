package wire

import "testing"

func TestRelayReplicationOn(t *testing.T) {
	for v, want := range map[string]bool{
		"": false, "false": false, "off": false, "0": false, "no": false, "f": false, "of": false,
		"true": true, "TRUE": true, "t": true, "on": true, "yes": true, "y": true, "1": true, "database": true, "Database": true,
	} {
		if got := replicationOn(v); got != want {
			t.Errorf("replicationOn(%q) = %v, want %v", v, got, want)
		}
	}
}
