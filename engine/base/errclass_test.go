package base

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

func TestClassify(t *testing.T) {
	pg := func(code string) error { return fmt.Errorf("page: %w", &pgconn.PgError{Code: code, Message: "m"}) }
	for _, c := range []struct {
		name string
		err  error
		want Class
	}{
		{"serialization failure", pg("40001"), Retry},
		{"deadlock", pg("40P01"), Retry},
		{"lock timeout", pg("55P03"), Retry},
		{"statement cancelled", pg("57014"), Retry},
		{"admin shutdown", pg("57P01"), Retry},
		{"cannot connect now", pg("57P03"), Retry},
		{"connection failure", pg("08006"), Retry},
		{"too many connections", pg("53300"), Retry},
		{"idle in transaction timeout", pg("25P03"), Retry},
		{"division by zero", pg("22012"), Data},
		{"unique violation", pg("23505"), Data},
		{"undefined table", pg("42P01"), Data},
		{"insufficient privilege", pg("42501"), Data},
		{"program limit", pg("54000"), Data},
		{"raised by a trigger", pg("P0001"), Data},
		{"context cancelled", fmt.Errorf("x: %w", context.Canceled), Retry},
		{"deadline", context.DeadlineExceeded, Retry},
		{"EOF", fmt.Errorf("read: %w", io.ErrUnexpectedEOF), Retry},
		{"net error", &net.OpError{Op: "read", Err: errors.New("connection reset by peer")}, Retry},
		{"closed conn", errors.New("conn closed"), Retry},
		{"closed pool", errors.New("closed pool"), Retry},
		{"decode error", fmt.Errorf("definition 3: bad compiled form: %w", errors.New("unexpected end of JSON input")), Internal},
		{"scan error", errors.New("can't scan into dest[0]: cannot scan text (OID 25) in text format into *int64"), Internal},
	} {
		if got := Classify(c.err); got != c.want {
			t.Errorf("%s: Classify(%v) = %v, want %v", c.name, c.err, got, c.want)
		}
		if got := Transient(c.err); got != (c.want == Retry) {
			t.Errorf("%s: transient = %v", c.name, got)
		}
		if got := Level(c.err); got != map[bool]slog.Level{true: slog.LevelError, false: slog.LevelWarn}[c.want == Internal] {
			t.Errorf("%s: logged at %v", c.name, got)
		}
	}
	if Transient(nil) {
		t.Error("Transient(nil)")
	}
}
