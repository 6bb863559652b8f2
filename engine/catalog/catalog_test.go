package catalog

import (
	"strconv"
	"strings"
	"testing"
)

func TestOneMigrationPerFormatVersion(t *testing.T) {
	ms := Migrations()
	if len(ms) != FormatVersion {
		t.Fatalf("%d migrations for format %d", len(ms), FormatVersion)
	}
	for i, m := range ms {
		if strings.TrimSpace(m) == "" {
			t.Errorf("migration %d is empty (an unused slot is SELECT 1;)", i+1)
		}
		if strings.HasPrefix(m, "-- "+strconv.Itoa(i+1)+":") {
			t.Errorf("migration %d kept its header", i+1)
		}
	}
	if !strings.Contains(ms[0], "CREATE TABLE {{S}}._instance") {
		t.Errorf("migration 1 does not create the marker: %.80q", ms[0])
	}
}

func TestFunctionsInOrder(t *testing.T) {
	f := Functions()
	// The lifecycle functions call _check_acting (privileged), so they
	// come after it.
	if i, j := strings.Index(f, "FUNCTION {{S}}._check_acting("), strings.Index(f, "FUNCTION {{S}}._lifecycle_check("); i < 0 || j < 0 || i > j {
		t.Fatalf("_check_acting at %d, _lifecycle_check at %d", i, j)
	}
}

func TestStripHeader(t *testing.T) {
	for _, c := range []struct{ in, want, err string }{
		{"-- doc\n--\n-- more\n\nSELECT 1;", "SELECT 1;", ""},
		{"-- doc\n\n\nCREATE TABLE x ();\n", "\nCREATE TABLE x ();\n", ""},
		{"\nSELECT 1;", "SELECT 1;", ""},
		{"-- doc\nSELECT 1;\n\n", "", "is not a comment"},
		{"-- doc only", "", "no blank line"},
	} {
		got, err := stripHeader(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("stripHeader(%q) error = %v, want %q", c.in, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("stripHeader(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
}

func TestRender(t *testing.T) {
	got := Render(`{{S}}.t {{SN}} {{SF}}.v {{SFN}} '{{SL}}' '{{SFL}}'`, `tr"x`, "tr_fence'")
	want := `"tr""x".t 'tr"x' "tr_fence'".v 'tr_fence''' '"tr""x"' '"tr_fence''"'`
	if got != want {
		t.Fatalf("Render = %s\nwant     %s", got, want)
	}
}
