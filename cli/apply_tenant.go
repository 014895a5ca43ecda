package cli

// Tenant-control documents (kind: ApiKey, kind: TenantLimit) in the files
// of apply -f and delete -f, applied over the REST API with the same
// declarative logic the daemon uses at boot (tenant.ApplyKey).

import (
	"context"
	"errors"
	"fmt"

	"github.com/infergate/infergate/api/client"
	"github.com/infergate/infergate/apierror"
	"github.com/infergate/infergate/rules"
	"github.com/infergate/infergate/tenant"
)

// fileDoc is one document of an apply/delete file: a rule, or a decoded
// key or tenant limit.
type fileDoc struct {
	rules.Document
	key   *tenant.KeySpec
	limit *tenant.TenantLimit
}

func (d fileDoc) ref() string {
	switch {
	case d.key != nil:
		return fmt.Sprintf("ApiKey %s/%s (%s)", d.key.TenantID, d.key.Name, d.key.KeyID)
	case d.limit != nil:
		return "TenantLimit " + d.limit.TenantID
	}
	return ruleRef(d.Rule)
}

// decodeDocs decodes the tenant documents of docs; the first bad one fails
// the load, as a bad rule does, so a typo applies nothing.
func decodeDocs(docs []rules.Document) ([]fileDoc, error) {
	out := make([]fileDoc, 0, len(docs))
	for _, d := range docs {
		fd := fileDoc{Document: d}
		switch d.Kind {
		case rules.KindAPIKey:
			k, err := tenant.DecodeKeyDocument(d.Spec)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", d.Source, err)
			}
			fd.key = &k
		case rules.KindTenantLimit:
			t, err := tenant.DecodeTenantLimitDocument(d.Spec)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", d.Source, err)
			}
			fd.limit = &t
		}
		out = append(out, fd)
	}
	return out, nil
}

// applyDoc applies one document and returns what happened.
func applyDoc(ctx context.Context, c *client.Client, d fileDoc) (string, error) {
	switch {
	case d.key != nil:
		o, err := tenant.ApplyKey(ctx, remoteKeys{c}, *d.key)
		return string(o), err
	case d.limit != nil:
		o, err := tenant.ApplyTenantLimit(ctx, remoteKeys{c}, *d.limit)
		return string(o), err
	}
	res, err := c.Apply(ctx, d.Rule)
	return fmt.Sprint(res), err
}

// deleteDoc deletes what one document names.
func deleteDoc(ctx context.Context, c *client.Client, d fileDoc) error {
	switch {
	case d.key != nil:
		return c.DeleteAPIKey(ctx, d.key.KeyID)
	case d.limit != nil:
		return c.DeleteTenantLimit(ctx, d.limit.TenantID)
	}
	return c.Delete(ctx, client.KeyOf(d.Rule))
}

// isDocRejection: the server refused the document, or the declarative
// logic did (e.g. a file that drops a limit): about this document only.
func isDocRejection(err error) bool {
	_, local := apierror.As(err)
	return isRejection(err) || local
}

// remoteKeys is the REST client as a tenant.KeyStore.
type remoteKeys struct{ c *client.Client }

func (r remoteKeys) CreateKey(ctx context.Context, s tenant.KeySpec) (tenant.Created, error) {
	c, err := r.c.CreateAPIKey(ctx, s)
	var ae *client.APIError
	if errors.As(err, &ae) && ae.ErrorCode == tenant.CodeKeyExists {
		return c, fmt.Errorf("%w: %w", tenant.ErrKeyExists, err)
	}
	return c, racedErr(err)
}

// racedErr marks a 409 revision_conflict (another replica wrote first) so
// tenant.ApplyKey retries it.
func racedErr(err error) error {
	var ae *client.APIError
	if errors.As(err, &ae) && ae.ErrorCode == apierror.CodeRevisionConflict {
		return fmt.Errorf("%w: %w", tenant.ErrRaced, err)
	}
	return err
}

func (r remoteKeys) GetKey(ctx context.Context, id string) (tenant.KeyView, error) {
	return r.c.GetAPIKey(ctx, id)
}

func (r remoteKeys) PatchKey(ctx context.Context, id string, p tenant.KeyPatch) (tenant.KeyView, error) {
	v, err := r.c.PatchAPIKey(ctx, id, p)
	return v, racedErr(err)
}

func (r remoteKeys) TenantLimits(ctx context.Context, id string) ([]tenant.TenantLimit, error) {
	return r.c.ListTenantLimits(ctx, id)
}

func (r remoteKeys) SetTenantLimit(ctx context.Context, t tenant.TenantLimit) (tenant.TenantLimit, error) {
	v, err := r.c.SetTenantLimit(ctx, t)
	return v, racedErr(err)
}
