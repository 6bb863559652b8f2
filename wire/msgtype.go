package wire

// Message types of protocol 3 (PostgreSQL docs, "Message Formats"). A
// letter means one thing from the client and another from the server, so
// each direction has its own names.

// Frontend (client→server) message types.
const (
	msgBind         = 'B'
	msgClose        = 'C'
	msgCopyData     = 'd'
	msgCopyDone     = 'c'
	msgCopyFail     = 'f'
	msgDescribe     = 'D'
	msgExecute      = 'E'
	msgFlush        = 'H'
	msgFunctionCall = 'F'
	msgParse        = 'P'
	msgPassword     = 'p' // also SASL responses
	msgQuery        = 'Q'
	msgSync         = 'S'
	msgTerminate    = 'X'
)

// Backend (server→client) message types.
const (
	msgBackendKeyData       = 'K'
	msgBindComplete         = '2'
	msgCopyBothResponse     = 'W'
	msgCopyInResponse       = 'G'
	msgCloseComplete        = '3'
	msgCommandComplete      = 'C'
	msgDataRow              = 'D'
	msgEmptyQueryResponse   = 'I'
	msgErrorResponse        = 'E'
	msgNoData               = 'n'
	msgNoticeResponse       = 'N'
	msgNotification         = 'A'
	msgParameterDescription = 't'
	msgParameterStatus      = 'S'
	msgParseComplete        = '1'
	msgPortalSuspended      = 's'
	msgReadyForQuery        = 'Z'
	msgRowDescription       = 'T'
)

// Describe and Close name a prepared statement or a portal.
const (
	objStatement = 'S'
	objPortal    = 'P'
)
