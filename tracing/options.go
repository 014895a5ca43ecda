package tracing

import (
	"fmt"
	"net/url"
)

// Options configure tracing. The datapath embeds them; the serve flags of
// the same names bind to them.
type Options struct {
	// Endpoint is the OTLP/HTTP collector, e.g. http://127.0.0.1:4318
	// (the path /v1/traces is added when the URL has none). Empty: off.
	Endpoint string `yaml:"otlp-endpoint"`
	// SampleRatio is the share of new traces recorded (0 to 1); a client's
	// traceparent decides for its own trace.
	SampleRatio float64 `yaml:"trace-sample-ratio"`
	// ServiceName is the service.name resource attribute.
	ServiceName string `yaml:"trace-service-name"`
}

// DefaultOptions: off; when an endpoint is set, every trace, as "infergate".
func DefaultOptions() Options {
	return Options{SampleRatio: 1, ServiceName: "infergate"}
}

// Validate checks the endpoint is an http(s) URL with a host.
func (o Options) Validate() error {
	if o.Endpoint == "" {
		return nil
	}
	u, err := url.Parse(o.Endpoint)
	if err != nil {
		return fmt.Errorf("otlp-endpoint %q: %w", o.Endpoint, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("otlp-endpoint %q: want http://host:port or https://host:port", o.Endpoint)
	}
	if o.SampleRatio < 0 || o.SampleRatio > 1 {
		return fmt.Errorf("trace-sample-ratio %v: want 0 to 1", o.SampleRatio)
	}
	return nil
}

// tracesURL is the endpoint with the OTLP traces path when it has none.
func (o Options) tracesURL() string {
	u, _ := url.Parse(o.Endpoint)
	if u.Path == "" || u.Path == "/" {
		u.Path = "/v1/traces"
	}
	return u.String()
}
