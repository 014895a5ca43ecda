package api

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"
	"github.com/infergate/infergate/apierror"
	"github.com/sirupsen/logrus"
)

// retryAfterSeconds is what a client is told to wait when writes are gated by
// boot replay; LoxiLB sends the same value.
const retryAfterSeconds = 5

// headerRetryAfter is the HTTP header set on 503 not_ready answers.
const headerRetryAfter = "Retry-After"

// resultSuccess is LoxiLB's success body text; loxicmd checks for it.
const resultSuccess = "Success"

// ResultBody is the success (and LoxiLB-compatible) result envelope.
type ResultBody struct {
	Result string `json:"result"`
}

// ErrorBody is the error envelope: LoxiLB's {code, message, result} plus our
// stable machine code and the offending field path.
type ErrorBody struct {
	Code      int    `json:"code"`
	Message   string `json:"message"`
	Result    string `json:"result"`
	ErrorCode string `json:"error_code"`
	Field     string `json:"field,omitempty"`
}

// errorBodyOf renders e in the wire shape. Result falls back to Message (and
// vice versa) because LoxiLB clients read result while people read message.
func errorBodyOf(e *apierror.Error) ErrorBody {
	msg := e.Message
	if msg == "" {
		msg = e.Result
	}
	res := e.Result
	if res == "" {
		res = msg
	}
	return ErrorBody{Code: e.Status, Message: msg, Result: res, ErrorCode: e.Code, Field: e.Field}
}

// internalError is the only body an unexpected failure produces: its cause is
// logged, never sent, because it may contain paths or rule content.
func internalError() *apierror.Error {
	return apierror.New(http.StatusInternalServerError, apierror.CodeInternal, "", "",
		"internal error; see the gateway log")
}

// writeError is the one place errors become HTTP. A typed *apierror.Error is
// rendered as is; anything else is logged and answered with 500 internal.
func writeError(c *gin.Context, log logrus.FieldLogger, err error) {
	e, ok := apierror.As(err)
	if !ok || e.Status < 400 || e.Status > 599 {
		log.WithError(err).WithFields(logrus.Fields{
			"method": c.Request.Method,
			"route":  c.FullPath(),
		}).Error("api: unexpected error")
		e = internalError()
	} else if e.Status >= 500 && e.Code != apierror.CodeNotReady {
		// not_ready is expected during boot; one line per gated write
		// would only be noise.
		log.WithError(err).WithFields(logrus.Fields{
			"method":     c.Request.Method,
			"route":      c.FullPath(),
			"error_code": e.Code,
		}).Warn("api: request failed")
	}
	if e.Code == apierror.CodeNotReady || e.Code == apierror.CodeStoreUnavailable {
		c.Header(headerRetryAfter, strconv.Itoa(retryAfterSeconds))
	}
	c.AbortWithStatusJSON(e.Status, errorBodyOf(e))
}

// notReady is the boot-gate answer for writes during replay.
func notReady() *apierror.Error {
	return apierror.New(http.StatusServiceUnavailable, apierror.CodeNotReady, "",
		"Maintenance mode",
		"configuration writes are rejected until the boot config replay settles")
}

// errBodyTooLarge reports whether err came from the request body limit.
func errBodyTooLarge(err error) bool {
	var mbe *http.MaxBytesError
	return errors.As(err, &mbe)
}
