package quarantine

import (
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// Only a failure the rows being applied can cause holds keys apart: data
// exceptions (class 22) and constraint violations (class 23). Lock waits,
// cancels, connection loss and errors of ours hold up the page instead.
func TestPoisonous(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{&pgconn.PgError{Code: "22012", Message: "division by zero"}, true},
		{&pgconn.PgError{Code: "22P02"}, true},
		{&pgconn.PgError{Code: "23505"}, true},
		{fmt.Errorf("page: %w", &pgconn.PgError{Code: "23502"}), true},
		{&pgconn.PgError{Code: "55P03"}, false},
		{&pgconn.PgError{Code: "57014"}, false},
		{&pgconn.PgError{Code: "40P01"}, false},
		{&pgconn.PgError{Code: "42501"}, false},
		{errors.New("conn closed"), false},
	} {
		if got := Poisonous(c.err); got != c.want {
			t.Errorf("Poisonous(%v) = %v, want %v", c.err, got, c.want)
		}
	}
	if got := ErrMessage(fmt.Errorf("x: %w", &pgconn.PgError{Code: "22012", Message: "division by zero"})); got != "division by zero" {
		t.Errorf("ErrMessage of a Postgres error: %q", got)
	}
	if got := ErrMessage(errors.New("plain")); got != "plain" {
		t.Errorf("ErrMessage of another error: %q", got)
	}
}
