package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"

	"github.com/gin-gonic/gin"
	"github.com/infergate/infergate/apierror"
	"github.com/infergate/infergate/tlsmat"
)

// CertStore is the SNI certificate store behind LoxiLB's
// /sni/certificates; *tlsmat.Store is the implementation.
type CertStore interface {
	Register(hostname, certPath string) error
	Unregister(hostname string) error
	List() []tlsmat.Info
}

var _ CertStore = (*tlsmat.Store)(nil)

// routeSNI is LoxiLB's SNI certificate store route.
const routeSNI = "/sni/certificates"

// SNICertificateEntry is POST /sni/certificates (and DELETE's hostname).
// certPath defaults to <cert-root>/<hostname>.
type SNICertificateEntry struct {
	Hostname string `json:"hostname"`
	CertPath string `json:"certPath,omitempty"`
}

// SNICertificateList is GET /sni/certificates: LoxiLB's envelope, each row
// with the certificate's identity and expiry (never key material).
type SNICertificateList struct {
	Certificates      []tlsmat.Info `json:"certificates"`
	TotalCertificates int           `json:"totalCertificates"`
}

// SNIResult is LoxiLB's {message} answer to SNI writes.
type SNIResult struct {
	Message string `json:"message"`
}

func (s *Server) listSNI(c *gin.Context) {
	out := SNICertificateList{Certificates: []tlsmat.Info{}}
	if s.certs != nil {
		out.Certificates = s.certs.List()
	}
	out.TotalCertificates = len(out.Certificates)
	c.JSON(http.StatusOK, out)
}

func (s *Server) postSNI(c *gin.Context) {
	e, ok := s.sniBody(c)
	if !ok {
		return
	}
	if err := s.certs.Register(e.Hostname, e.CertPath); err != nil {
		writeError(c, s.log, sniError(err))
		return
	}
	s.log.WithField("hostname", e.Hostname).Info("api: SNI certificate registered")
	c.JSON(http.StatusOK, SNIResult{Message: "certificate for " + e.Hostname + " loaded"})
}

func (s *Server) deleteSNI(c *gin.Context) {
	e, ok := s.sniBody(c)
	if !ok {
		return
	}
	if err := s.certs.Unregister(e.Hostname); err != nil {
		writeError(c, s.log, sniError(err))
		return
	}
	s.log.WithField("hostname", e.Hostname).Info("api: SNI certificate removed")
	c.JSON(http.StatusOK, SNIResult{Message: "certificate for " + e.Hostname + " removed"})
}

// sniBody decodes {hostname, certPath} (hostname also from ?hostname=).
func (s *Server) sniBody(c *gin.Context) (SNICertificateEntry, bool) {
	var e SNICertificateEntry
	if s.certs == nil {
		writeError(c, s.log, apierror.New(http.StatusNotImplemented, apierror.CodeUnsupported, "", "", "no certificate store"))
		return e, false
	}
	body, err := io.ReadAll(c.Request.Body)
	if err != nil {
		writeError(c, s.log, bodyTooLarge(s.maxBody))
		return e, false
	}
	if len(body) > 0 {
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&e); err != nil {
			writeError(c, s.log, apierror.BadRequest(apierror.CodeMalformedJSON, "", "", "body must be {\"hostname\": ..., \"certPath\": ...}: "+err.Error()))
			return e, false
		}
	}
	if e.Hostname == "" {
		e.Hostname = c.Query("hostname")
	}
	if why := tlsmat.CheckHostname(e.Hostname); why != "" {
		writeError(c, s.log, apierror.BadRequest(apierror.CodeInvalidField, "hostname", "", why))
		return e, false
	}
	return e, true
}

// sniError maps the store's errors to the API's typed error.
func sniError(err error) error {
	var me *tlsmat.MaterialError
	switch {
	case errors.As(err, &me):
		return &apierror.Error{Status: http.StatusBadRequest, Code: apierror.CodeInvalidField, Field: "certPath",
			Message: "certificate cannot be used: " + me.Error(), Err: err}
	case errors.Is(err, tlsmat.ErrInUse):
		return &apierror.Error{Status: http.StatusConflict, Code: apierror.CodeInvalidCombo, Field: "hostname",
			Message: "the certificate is in use by rules; delete them first", Err: err}
	case errors.Is(err, tlsmat.ErrNotRegistered):
		return apierror.NotFound(apierror.CodeRuleNotFound, "", "hostname is not in the SNI store")
	}
	return err
}
