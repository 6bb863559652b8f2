// Package pgerr is the one error type of trellis-proxy: everything a Postgres
// ErrorResponse can carry (SQLSTATE, message, detail, hint, position), plus the
// Trellis class and variant that programs match on (surface spec §12.1).
//
// It imports nothing from this module so every package can use it.
package pgerr

import (
	"errors"
	"fmt"
	"strings"
)

// SQLSTATE codes used across the project. Names follow Postgres's errcodes.txt.
const (
	SuccessfulCompletion         = "00000"
	Warning                      = "01000"
	ConnectionException          = "08000"
	ConnectionFailure            = "08006"
	ProtocolViolation            = "08P01"
	FeatureNotSupported          = "0A000"
	InvalidParameterValue        = "22023"
	ActiveSQLTransaction         = "25001"
	InFailedSQLTransaction       = "25P02"
	InvalidAuthorizationSpec     = "28000"
	InvalidPassword              = "28P01"
	DependentObjectsStillExist   = "2BP01"
	SerializationFailure         = "40001"
	DeadlockDetected             = "40P01"
	SyntaxError                  = "42601"
	InsufficientPrivilege        = "42501"
	NameTooLong                  = "42622"
	UndefinedColumn              = "42703"
	UndefinedFunction            = "42883"
	UndefinedTable               = "42P01"
	UndefinedObject              = "42704"
	DuplicateColumn              = "42701"
	DuplicateObject              = "42710"
	DuplicateTable               = "42P07"
	DuplicateAlias               = "42712"
	DatatypeMismatch             = "42804"
	GroupingError                = "42803"
	WindowingError               = "42P20"
	InvalidObjectDefinition      = "42P17"
	ProgramLimitExceeded         = "54000"
	StatementTooComplex          = "54001"
	ObjectNotInPrerequisiteState = "55000"
	LockNotAvailable             = "55P03"
	QueryCanceled                = "57014"
	AdminShutdown                = "57P01"
	CannotConnectNow             = "57P03"
	TooManyConnections           = "53300"
	InternalError                = "XX000"

	// Added for the grammar package.
	CharacterNotInRepertoire = "22021"
	AmbiguousColumn          = "42702"
	ReservedName             = "42939"
)

// Severities as Postgres spells them in the S and V fields.
const (
	SeverityError  = "ERROR"
	SeverityFatal  = "FATAL"
	SeverityNotice = "NOTICE"
)

// Error is an error a person can act on (architecture D13). The zero Severity
// means ERROR.
type Error struct {
	Severity string
	Code     string // SQLSTATE, five characters
	Message  string // names the statement, table, column or call at fault
	Detail   string // human detail; the trellis class/variant line is appended by DetailWithClass
	Hint     string // the fix, when there is one
	Position int    // 1-based character offset into the client's query; 0 when none

	// InternalPosition and InternalQuery locate the error inside a statement
	// the proxy received indirectly (trellis.apply), as Postgres does for
	// PL/pgSQL.
	InternalPosition int
	InternalQuery    string

	Context string // CONTEXT line, e.g. "while running TRANSFORM public.t"

	// Class and Variant are the Trellis taxonomy (surface §12.2), e.g.
	// "parse"/"JoinNotSupported". Empty for errors relayed from Postgres.
	Class   string
	Variant string

	Err error // wrapped cause, never shown to the client
}

// New returns an ERROR with the given SQLSTATE and message.
func New(code, message string) *Error {
	return &Error{Code: code, Message: message}
}

// Newf is New with formatting.
func Newf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.SeverityOrDefault())
	b.WriteString(": ")
	b.WriteString(e.Message)
	b.WriteString(" (SQLSTATE ")
	b.WriteString(e.Code)
	b.WriteString(")")
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// SeverityOrDefault returns the severity, ERROR when unset.
func (e *Error) SeverityOrDefault() string {
	if e.Severity == "" {
		return SeverityError
	}
	return e.Severity
}

// DetailWithClass returns the DETAIL field as sent to clients: the human
// detail followed by the machine-readable "trellis: class/Variant" line.
func (e *Error) DetailWithClass() string {
	if e.Class == "" || e.Variant == "" {
		return e.Detail
	}
	line := "trellis: " + e.Class + "/" + e.Variant
	if e.Detail == "" {
		return line
	}
	return e.Detail + "\n" + line
}

// WithHint sets the hint and returns e, for chaining at construction.
func (e *Error) WithHint(format string, args ...any) *Error {
	e.Hint = fmt.Sprintf(format, args...)
	return e
}

// WithDetail sets the detail and returns e.
func (e *Error) WithDetail(format string, args ...any) *Error {
	e.Detail = fmt.Sprintf(format, args...)
	return e
}

// WithPosition sets the 1-based character position and returns e.
func (e *Error) WithPosition(pos int) *Error {
	e.Position = pos
	return e
}

// WithClass sets the Trellis class and variant and returns e.
func (e *Error) WithClass(class, variant string) *Error {
	e.Class, e.Variant = class, variant
	return e
}

// Wrap records cause as the wrapped error and returns e.
func (e *Error) Wrap(cause error) *Error {
	e.Err = cause
	return e
}

// As returns the *Error in err's chain, if any.
func As(err error) (*Error, bool) {
	var e *Error
	if errors.As(err, &e) {
		return e, true
	}
	return nil, false
}

// CodeOf returns the SQLSTATE of err: its own when it carries one (an *Error,
// or any error with a SQLState() string method such as pgconn.PgError), else
// XX000. A nil error has code 00000.
func CodeOf(err error) string {
	if err == nil {
		return SuccessfulCompletion
	}
	if e, ok := As(err); ok {
		return e.Code
	}
	var s interface{ SQLState() string }
	if errors.As(err, &s) {
		return s.SQLState()
	}
	return InternalError
}

// ShiftPosition returns a copy of e whose Position is moved by offset
// characters; used when a statement is one piece of a multi-statement string.
func (e *Error) ShiftPosition(offset int) *Error {
	c := *e
	if c.Position > 0 {
		c.Position += offset
	}
	return &c
}
