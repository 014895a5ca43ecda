// Package optconf fills an option struct from three sources besides its
// defaults: command-line flags, environment variables and a YAML file, in
// that order of precedence (flag > env > file > default), and renders the
// effective values back as YAML.
//
// It knows no option by name. It walks the struct's yaml tags (descending
// into `yaml:",inline"` sub-structs, skipping `yaml:"-"`), so a knob added
// to a package's Options with a yaml name and a flag of the same name is
// configurable from the file and the environment with no further code: the
// option structs stay composed, never re-listed. A field tagged
// `optconf:"secret"` holds a secret inline and is redacted when rendered.
package optconf
