package swagger

// The OpenAPI 2.0 object model, limited to what the document uses. Typed
// rather than map[string]any so a misspelt key is a compile error.

// Doc is the root swagger object.
type Doc struct {
	Swagger     string              `json:"swagger"`
	Info        Info                `json:"info"`
	BasePath    string              `json:"basePath"`
	Schemes     []string            `json:"schemes,omitempty"`
	Consumes    []string            `json:"consumes,omitempty"`
	Produces    []string            `json:"produces,omitempty"`
	Paths       map[string]PathItem `json:"paths"`
	Definitions map[string]*Schema  `json:"definitions"`
	Tags        []Tag               `json:"tags,omitempty"`
	// SecurityDefinitions and Security give Swagger UI its Authorize
	// button and make "Try it out" send the token.
	SecurityDefinitions map[string]SecurityScheme `json:"securityDefinitions,omitempty"`
	Security            []SecurityRequirement     `json:"security,omitempty"`
}

// SecurityScheme is a swagger 2.0 security definition.
type SecurityScheme struct {
	Type        string `json:"type"`
	Name        string `json:"name,omitempty"`
	In          string `json:"in,omitempty"`
	Description string `json:"description,omitempty"`
}

// SecurityRequirement maps a scheme name to its scopes (none for apiKey).
type SecurityRequirement map[string][]string

// Info describes the API.
type Info struct {
	Title       string `json:"title"`
	Description string `json:"description,omitempty"`
	Version     string `json:"version"`
}

// Tag groups operations in the UI.
type Tag struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
}

// PathItem maps a lower-case HTTP method to its operation.
type PathItem map[string]*Operation

// Operation is one method on one path.
type Operation struct {
	Tags        []string             `json:"tags,omitempty"`
	Summary     string               `json:"summary"`
	Description string               `json:"description,omitempty"`
	OperationID string               `json:"operationId"`
	Consumes    []string             `json:"consumes,omitempty"`
	Produces    []string             `json:"produces,omitempty"`
	Parameters  []Parameter          `json:"parameters,omitempty"`
	Responses   map[string]*Response `json:"responses"`
	// Security overrides the document's; a pointer so an empty list (no
	// credential needed) is written as [] instead of being omitted.
	Security *[]SecurityRequirement `json:"security,omitempty"`
	// Examples are named request bodies (vendor extension; the UI shows the
	// body schema's own example, which is the first of these).
	Examples map[string]interface{} `json:"x-examples,omitempty"`
}

// Parameter is a path, query or body parameter.
type Parameter struct {
	Name        string        `json:"name"`
	In          string        `json:"in"`
	Description string        `json:"description,omitempty"`
	Required    bool          `json:"required"`
	Type        string        `json:"type,omitempty"`
	Format      string        `json:"format,omitempty"`
	Enum        []interface{} `json:"enum,omitempty"`
	Schema      *Schema       `json:"schema,omitempty"`
}

// Response is one documented status.
type Response struct {
	Description string                 `json:"description"`
	Schema      *Schema                `json:"schema,omitempty"`
	Headers     map[string]Header      `json:"headers,omitempty"`
	Examples    map[string]interface{} `json:"examples,omitempty"`
}

// Header is a documented response header.
type Header struct {
	Type        string `json:"type"`
	Description string `json:"description,omitempty"`
}

// Schema is the subset of JSON Schema swagger 2.0 allows.
type Schema struct {
	Ref                  string             `json:"$ref,omitempty"`
	Type                 string             `json:"type,omitempty"`
	Format               string             `json:"format,omitempty"`
	Description          string             `json:"description,omitempty"`
	Enum                 []interface{}      `json:"enum,omitempty"`
	Default              interface{}        `json:"default,omitempty"`
	Minimum              *float64           `json:"minimum,omitempty"`
	Maximum              *float64           `json:"maximum,omitempty"`
	MaxItems             *int               `json:"maxItems,omitempty"`
	MinItems             *int               `json:"minItems,omitempty"`
	Items                *Schema            `json:"items,omitempty"`
	Properties           map[string]*Schema `json:"properties,omitempty"`
	AdditionalProperties *Schema            `json:"additionalProperties,omitempty"`
	Required             []string           `json:"required,omitempty"`
	ReadOnly             bool               `json:"readOnly,omitempty"`
	Nullable             bool               `json:"x-nullable,omitempty"`
	Example              interface{}        `json:"example,omitempty"`
	// Served lists the enum values infergate serves when it accepts
	// LoxiLB's wider enum on the wire; the others are answered
	// 400 unsupported.
	Served []interface{} `json:"x-infergate-served,omitempty"`
}
