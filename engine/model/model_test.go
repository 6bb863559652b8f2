package model

import (
	"errors"
	"slices"
	"testing"

	"github.com/trellis-proxy/trellis-proxy/pgerr"
)

func ptr(s string) *string { return &s }

func TestKeyRoundTrip(t *testing.T) {
	for _, c := range []struct {
		name     string
		parts    []*string
		nullable bool
		want     string
	}{
		{"plain", []*string{ptr("42")}, false, "42"},
		{"nullable single", []*string{ptr("a")}, true, "a"},
		{"null part", []*string{nil}, true, "\x01"},
		{"composite", []*string{ptr("1"), ptr("x")}, false, "1\x1fx"},
		{"escapes", []*string{ptr("a\x1fb"), ptr("\x01\x1b")}, false, "a\x1b" + "fb\x1f\x1ba\x1b\x1b"},
		{"null and empty differ", []*string{nil, ptr("")}, true, "\x01\x1f"},
	} {
		k := EncodeKey(c.parts, c.nullable)
		if k != c.want {
			t.Errorf("%s: EncodeKey = %q, want %q", c.name, k, c.want)
		}
		got, ok := DecodeKey(k, len(c.parts), c.nullable)
		if !ok || !slices.EqualFunc(got, c.parts, func(a, b *string) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }) {
			t.Errorf("%s: DecodeKey(%q) = %v, %v", c.name, k, got, ok)
		}
	}
	for _, bad := range []string{"a\x1fb\x1fc", "a\x1b", "a\x1bz\x1fb", "\x01x\x1fb"} {
		if _, ok := DecodeKey(bad, 2, false); ok {
			t.Errorf("DecodeKey(%q) accepted a malformed key", bad)
		}
	}
}

func TestSpecCheck(t *testing.T) {
	ok := func() Spec {
		return Spec{Target: TableName{Name: "t"}, Source: TableName{Name: "s"}, Fields: []Field{{Name: "a", Expr: `"__s"."a"`}}}
	}
	s := ok()
	if err := s.Check("trellis_targets"); err != nil || s.Target.Schema != "trellis_targets" || s.Source.Schema != "public" {
		t.Fatalf("Check = %v, schemas %q %q", err, s.Target.Schema, s.Source.Schema)
	}
	for _, c := range []struct {
		name  string
		edit  func(*Spec)
		code  string
		class string
	}{
		{"no fields", func(s *Spec) { s.Fields = nil }, pgerr.InvalidParameterValue, "InvalidDefinition"},
		{"reserved name", func(s *Spec) { s.Fields[0].Name = "__x" }, pgerr.InvalidParameterValue, "ReservedName"},
		{"duplicate", func(s *Spec) { s.Fields = append(s.Fields, s.Fields[0]) }, pgerr.DuplicateColumn, "DuplicateField"},
		{"aggregate without group by", func(s *Spec) { s.Fields[0].Agg = AggSum }, pgerr.GroupingError, "AggregateWithoutGroupBy"},
		{"ungrouped", func(s *Spec) { s.GroupBy = []GroupKey{{Name: "g", Expr: "1"}} }, pgerr.GroupingError, "UngroupedColumn"},
		{"count(*) with an argument", func(s *Spec) {
			s.GroupBy = []GroupKey{{Name: "g", Expr: "1"}}
			s.Fields[0].Agg = AggCountStar
		}, pgerr.InvalidParameterValue, "InvalidDefinition"},
		{"name too long", func(s *Spec) { s.Target.Name = string(make([]byte, 60)) }, pgerr.NameTooLong, "NameTooLong"},
	} {
		s := ok()
		c.edit(&s)
		err := s.Check("x")
		var pe *pgerr.Error
		if !errors.As(err, &pe) || pe.Code != c.code {
			t.Errorf("%s: Check = %v, want SQLSTATE %s", c.name, err, c.code)
			continue
		}
		if pe.Variant != c.class {
			t.Errorf("%s: variant %q, want %q", c.name, pe.Variant, c.class)
		}
	}
}

func TestReadsOnceGroupKeysFirst(t *testing.T) {
	s := Spec{GroupBy: []GroupKey{{Name: "g", Reads: []string{"r"}}}, Fields: []Field{{Name: "a", Reads: []string{"x", "r"}}, {Name: "b", Reads: []string{"x"}}}}
	if got := s.Reads(); !slices.Equal(got, []string{"r", "x"}) {
		t.Fatalf("Reads = %v", got)
	}
}
