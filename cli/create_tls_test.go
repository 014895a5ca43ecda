package cli

import (
	"testing"

	"github.com/infergate/infergate/rules"
	"github.com/spf13/pflag"
)

func TestCreateTLSFlags(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		check func(sa rules.ServiceArguments) bool
	}{
		{[]string{"--security=https", "--hsts-max-age=600", "--alpn=h2", "--tls-versions=TLSv1.3"}, func(sa rules.ServiceArguments) bool {
			return sa.Security == 1 && sa.HSTSMaxAge == 600 && len(sa.ALPNProtocols) == 1 && sa.TLSVersions[0] == "TLSv1.3" &&
				sa.MTLSFrontend == nil && sa.MTLSBackend == nil
		}},
		{[]string{"--security=e2etls", "--backend-ca-path=/ca.crt"}, func(sa rules.ServiceArguments) bool {
			return sa.Security == 2 && sa.MTLSBackend.BackendCAPath == "/ca.crt" && sa.MTLSBackend.VerifyServerCert == nil
		}},
		{[]string{"--security=e2ehttps", "--verify-server-cert=false"}, func(sa rules.ServiceArguments) bool {
			return sa.MTLSBackend != nil && sa.MTLSBackend.VerifyServerCert != nil && !*sa.MTLSBackend.VerifyServerCert
		}},
		{[]string{"--security=tls", "--client-cert-mode=required", "--client-ca-path=/c.crt"}, func(sa rules.ServiceArguments) bool {
			return sa.MTLSFrontend.ClientCertMode == "required" && sa.MTLSFrontend.ClientCAPath == "/c.crt"
		}},
		{nil, func(sa rules.ServiceArguments) bool { return sa.Security == 0 && sa.MTLSBackend == nil }},
	} {
		var tf tlsFlags
		fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
		tf.add(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		var sa rules.ServiceArguments
		if err := tf.apply(&sa); err != nil || !tc.check(sa) {
			t.Errorf("%v: err %v, got %+v", tc.args, err, sa)
		}
	}
	var tf tlsFlags
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	tf.add(fs)
	_ = fs.Parse([]string{"--security=ssl"})
	if err := tf.apply(&rules.ServiceArguments{}); err == nil {
		t.Error("--security=ssl accepted")
	}
	if got := protoCell(rules.ServiceArguments{Protocol: "tcp", Security: 1}); got != "tcp:https" {
		t.Error(got)
	}
}
