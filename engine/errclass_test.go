package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

func TestClassify(t *testing.T) {
	pg := func(code string) error { return fmt.Errorf("page: %w", &pgconn.PgError{Code: code, Message: "m"}) }
	for _, c := range []struct {
		name string
		err  error
		want errClass
	}{
		{"serialization failure", pg("40001"), errRetry},
		{"deadlock", pg("40P01"), errRetry},
		{"lock timeout", pg("55P03"), errRetry},
		{"statement cancelled", pg("57014"), errRetry},
		{"admin shutdown", pg("57P01"), errRetry},
		{"cannot connect now", pg("57P03"), errRetry},
		{"connection failure", pg("08006"), errRetry},
		{"too many connections", pg("53300"), errRetry},
		{"idle in transaction timeout", pg("25P03"), errRetry},
		{"division by zero", pg("22012"), errData},
		{"unique violation", pg("23505"), errData},
		{"undefined table", pg("42P01"), errData},
		{"insufficient privilege", pg("42501"), errData},
		{"program limit", pg("54000"), errData},
		{"raised by a trigger", pg("P0001"), errData},
		{"context cancelled", fmt.Errorf("x: %w", context.Canceled), errRetry},
		{"deadline", context.DeadlineExceeded, errRetry},
		{"EOF", fmt.Errorf("read: %w", io.ErrUnexpectedEOF), errRetry},
		{"net error", &net.OpError{Op: "read", Err: errors.New("connection reset by peer")}, errRetry},
		{"closed conn", errors.New("conn closed"), errRetry},
		{"closed pool", errors.New("closed pool"), errRetry},
		{"decode error", fmt.Errorf("definition 3: bad compiled form: %w", errors.New("unexpected end of JSON input")), errInternal},
		{"scan error", errors.New("can't scan into dest[0]: cannot scan text (OID 25) in text format into *int64"), errInternal},
	} {
		if got := classify(c.err); got != c.want {
			t.Errorf("%s: classify(%v) = %v, want %v", c.name, c.err, got, c.want)
		}
		if got := transient(c.err); got != (c.want == errRetry) {
			t.Errorf("%s: transient = %v", c.name, got)
		}
	}
	if transient(nil) {
		t.Error("transient(nil)")
	}
}
