package rules

import (
	"fmt"
	"unicode"
	"unicode/utf8"

	"github.com/infergate/infergate/apierror"
)

// fieldName is the rule's name (serviceArguments.name).
const fieldName = "name"

// checkName refuses a rule name holding control characters or invalid
// UTF-8: the name is a metrics label and a log field, where a newline or
// an escape sequence would forge lines.
func checkName(r *Rule) *apierror.Error {
	n := r.ServiceArguments.Name
	if !utf8.ValidString(n) {
		const msg = "name is not valid UTF-8"
		return invalidField(saPath(fieldName), msg, msg)
	}
	for _, c := range n {
		if unicode.IsControl(c) {
			msg := fmt.Sprintf("name holds the control character %U", c)
			return invalidField(saPath(fieldName), msg, msg)
		}
	}
	return nil
}
