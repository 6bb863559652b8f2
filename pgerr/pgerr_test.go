package pgerr

import (
	"errors"
	"fmt"
	"testing"
)

type sqlStateErr struct{ code string }

func (s sqlStateErr) Error() string    { return "x" }
func (s sqlStateErr) SQLState() string { return s.code }

func TestCodeOf(t *testing.T) {
	cases := []struct {
		err  error
		want string
	}{
		{nil, SuccessfulCompletion},
		{New(SyntaxError, "bad"), SyntaxError},
		{fmt.Errorf("wrapped: %w", New(UndefinedTable, "t")), UndefinedTable},
		{sqlStateErr{"40001"}, "40001"},
		{errors.New("plain"), InternalError},
	}
	for _, c := range cases {
		if got := CodeOf(c.err); got != c.want {
			t.Errorf("CodeOf(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}

func TestDetailWithClass(t *testing.T) {
	e := New(DuplicateTable, `target "t" exists`).WithClass("conflict", "TargetTableExists")
	if got := e.DetailWithClass(); got != "trellis: conflict/TargetTableExists" {
		t.Fatalf("got %q", got)
	}
	e.WithDetail("a table of that name exists")
	if got := e.DetailWithClass(); got != "a table of that name exists\ntrellis: conflict/TargetTableExists" {
		t.Fatalf("got %q", got)
	}
	if got := e.Error(); got != `ERROR: target "t" exists (SQLSTATE 42P07)` {
		t.Fatalf("Error() = %q", got)
	}
}

func TestShiftPosition(t *testing.T) {
	e := New(SyntaxError, "x").WithPosition(3)
	if s := e.ShiftPosition(10); s.Position != 13 || e.Position != 3 {
		t.Fatalf("shift: %d (orig %d)", s.Position, e.Position)
	}
	if s := New(SyntaxError, "x").ShiftPosition(10); s.Position != 0 {
		t.Fatalf("no position must stay 0, got %d", s.Position)
	}
}
