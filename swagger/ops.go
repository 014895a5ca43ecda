package swagger

import "reflect"

// addOpsPaths documents the operational reads: which build answers and
// which replicas share the rule store. /version is also served outside the
// base path (the API's test lists it as such).
func addOpsPaths(g *generator, v Views, paths map[string]PathItem, internal *Response) {
	if v.Version != nil {
		paths["/version"] = PathItem{
			"get": {
				Tags: []string{"operations"}, Summary: "Build of the answering gateway", OperationID: "getVersion",
				Description: "The same facts as `infergate version` and the infergate_build_info metric.",
				Responses: map[string]*Response{"200": {Description: "version, commit, go.",
					Schema: g.ref(reflect.TypeOf(v.Version))}, "500": internal},
			},
		}
	}
	if v.Replicas != nil {
		paths["/replicas"] = PathItem{
			"get": {
				Tags: []string{"operations"}, Summary: "Gateways sharing this one's rule store", OperationID: "getReplicas",
				Description: "Every live replica of the etcd store (id, API address, applied revision, rule count, digest of the " +
					"served set) and the store revision read. Replicas with equal digests serve the same rules. " +
					"501 no_shared_store when the gateway keeps its rules in its own state dir; 503 store_unavailable when etcd does not answer.",
				Responses: map[string]*Response{"200": {Description: "Replicas, sorted by id.",
					Schema: g.ref(reflect.TypeOf(v.Replicas))}, "500": internal},
			},
		}
	}
}
