package client

import (
	"context"
	"errors"
	"net/http"
)

// ApplyRaw is Apply for a body the caller already encoded (a rule from a
// LoxiLB lbconfig.txt, or one carrying keys this client's model lacks, such
// as loxicmd's TLS flags). k is the body's key, used to tell create from
// update; the server validates the body itself.
func (c *Client) ApplyRaw(ctx context.Context, k Key, body []byte) (Result, error) {
	exists, err := c.exists(ctx, k)
	if err != nil {
		return 0, err
	}
	err = c.do(ctx, http.MethodPost, pathLB, body, nil)
	var ae *APIError
	switch {
	case err == nil && exists:
		return Updated, nil
	case err == nil:
		return Created, nil
	case errors.As(err, &ae) && ae.Status == http.StatusConflict && ae.ErrorCode == errorCodeRuleExists:
		return Unchanged, nil
	}
	return 0, err
}
