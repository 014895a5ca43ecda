package daemon

import (
	"fmt"
	"strings"
)

// ParseTokenizers reads --kv-tokenizer values: "MODEL=PATH" binds a model
// name to a tokenizer, a bare "PATH" serves any other model. A model name
// may contain "/" but not "="; a path containing "=" needs the MODEL= form.
func ParseTokenizers(vals []string) (map[string]string, error) {
	if len(vals) == 0 {
		return nil, nil
	}
	out := map[string]string{}
	for _, v := range vals {
		model, path, ok := strings.Cut(v, "=")
		if !ok {
			model, path = "", v
		}
		if path == "" {
			return nil, fmt.Errorf("%q: empty tokenizer path", v)
		}
		if _, dup := out[model]; dup {
			return nil, fmt.Errorf("%q: model %q given twice", v, model)
		}
		out[model] = path
	}
	return out, nil
}
