package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"time"

	"golang.org/x/sync/singleflight"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilcache "k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/client-go/util/jsonpath"
	"k8s.io/klog/v2"
)

// The printer columns of a custom resource are those its CustomResourceDefinition
// declares for the version served (spec.versions[].additionalPrinterColumns), printed
// as kube-apiserver prints them (its tableconvertor): each a JSONPath over the object;
// a CRD that declares none gets AGE. The CRD is read from the fleet's cache when the
// fleet caches customresourcedefinitions.apiextensions.k8s.io of that cluster, else
// fetched from the cluster (which needs get on customresourcedefinitions: without it,
// or if the cluster cannot be reached, the table has AGE only, as for any resource the
// server knows nothing of) and kept for crdFresh.
const (
	// crdFresh is how long a CRD fetched from a cluster, or its absence, is used.
	crdFresh = time.Minute
	// crdTimeout bounds the wait of a Table for its CRD, beyond which it gets AGE.
	crdTimeout = 5 * time.Second
	// crdCacheSize bounds the CRDs (and absences) kept, over every cluster.
	crdCacheSize = 1024
)

var crdsGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// printerColumn is a column of spec.versions[].additionalPrinterColumns.
type printerColumn struct {
	Name        string `json:"name"`
	Type        string `json:"type"`
	Format      string `json:"format"`
	Description string `json:"description"`
	Priority    int32  `json:"priority"`
	JSONPath    string `json:"jsonPath"`
}

// crdColumns finds the printer columns of custom resources.
type crdColumns struct {
	configs ClusterConfigs
	// kept maps cluster + "\x00" + gvr.String() to []printerColumn, or nil for a
	// resource without a CRD the server can read.
	kept     *utilcache.LRUExpireCache
	inFlight singleflight.Group
}

func newCRDColumns(src Source) *crdColumns {
	configs, _ := src.(ClusterConfigs)
	return &crdColumns{configs: configs, kept: utilcache.NewLRUExpireCache(crdCacheSize)}
}

// mayBeCustom reports whether a resource can be defined by a CRD: the group of a CRD
// has a dot.
func mayBeCustom(gvr schema.GroupVersionResource) bool { return strings.Contains(gvr.Group, ".") }

// crdPrinterColumns returns the printer columns of gvr as the CRD of the first of
// clusters that has one declares them; ok is false if none has one the server can read.
// It may ask the clusters, so no lock may be held.
func (s *Server) crdPrinterColumns(ctx context.Context, gvr schema.GroupVersionResource, clusters []string) (cols []printerColumn, ok bool) {
	for _, cl := range clusters {
		if cols, ok := s.crdColumnsOf(ctx, cl, gvr); ok {
			return cols, true
		}
	}
	return nil, false
}

func (s *Server) crdColumnsOf(ctx context.Context, cluster string, gvr schema.GroupVersionResource) ([]printerColumn, bool) {
	name := gvr.Resource + "." + gvr.Group
	// The fleet's cache, if it holds the CRDs of the cluster.
	if rc := s.cache.lookup(crdsGVR); rc != nil && rc.hasCluster(cluster) {
		rc.mu.RLock()
		found := rc.getLocked(scope{cluster: cluster}, "", name)
		rc.mu.RUnlock()
		if len(found) == 1 {
			if u, ok := found[0].full().obj.(*unstructured.Unstructured); ok {
				return versionColumns(u.Object, gvr.Version)
			}
		}
	}
	c := s.crds
	if c.configs == nil {
		return nil, false
	}
	key := cluster + "\x00" + gvr.String()
	if v, ok := c.kept.Get(key); ok {
		cols := v.([]printerColumn)
		return cols, len(cols) > 0
	}
	ch := c.inFlight.DoChan(key, func() (any, error) {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), memberTimeout)
		defer cancel()
		cols, err := c.fetch(ctx, cluster, name, gvr.Version)
		if err != nil {
			klog.FromContext(ctx).V(2).Info("Cannot read a CRD for its printer columns; its Tables have AGE only", "cluster", cluster, "crd", name, "err", err)
			return []printerColumn(nil), nil // not kept: asked again at the next Table
		}
		c.kept.Add(key, cols, crdFresh)
		return cols, nil
	})
	t := time.NewTimer(crdTimeout)
	defer t.Stop()
	select {
	case res := <-ch:
		cols := res.Val.([]printerColumn)
		return cols, len(cols) > 0
	case <-ctx.Done():
	case <-t.C:
	}
	return nil, false
}

// fetch reads a CRD from a cluster and returns the columns of version; nil, without an
// error, if the cluster answers that it has no such CRD or that the server may not read
// it.
func (c *crdColumns) fetch(ctx context.Context, cluster, name, version string) ([]printerColumn, error) {
	cfg, err := c.configs.RESTConfig(cluster)
	if err != nil {
		return nil, err
	}
	res, err := memberGet(ctx, cfg, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"+name, nil, http.Header{"Accept": {"application/json"}})
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	switch res.StatusCode {
	case http.StatusOK:
	case http.StatusNotFound, http.StatusForbidden, http.StatusUnauthorized:
		return []printerColumn{}, nil
	default:
		return nil, fmt.Errorf("GET customresourcedefinitions/%s: %s", name, res.Status)
	}
	var crd map[string]any
	if err := json.NewDecoder(io.LimitReader(res.Body, maxOpenAPIBytes)).Decode(&crd); err != nil {
		return nil, err
	}
	cols, ok := versionColumns(crd, version)
	if !ok {
		return []printerColumn{}, nil
	}
	return cols, nil
}

// versionColumns returns the printer columns of version in a CRD: those it declares,
// or AGE, as kube-apiserver defaults them; ok is false if the CRD has no such version.
func versionColumns(crd map[string]any, version string) ([]printerColumn, bool) {
	versions, _, _ := unstructured.NestedSlice(crd, "spec", "versions")
	for _, v := range versions {
		vm, _ := v.(map[string]any)
		if vm["name"] != version {
			continue
		}
		raw, _ := vm["additionalPrinterColumns"].([]any)
		if len(raw) == 0 {
			return []printerColumn{{Name: "Age", Type: "date", JSONPath: ".metadata.creationTimestamp"}}, true
		}
		b, err := json.Marshal(raw)
		if err != nil {
			return nil, false
		}
		var cols []printerColumn
		if err := json.Unmarshal(b, &cols); err != nil {
			return nil, false
		}
		return cols, true
	}
	return nil, false
}

// columnsOfCRD returns the columns of a table for printer columns, each with its own
// parsed JSONPath (a JSONPath is not safe for concurrent use). A column whose JSONPath
// does not parse is printed empty, as kube-apiserver refuses such CRDs.
func columnsOfCRD(pcs []printerColumn) []column {
	cols := make([]column, 0, len(pcs))
	for _, pc := range pcs {
		desc := pc.Description
		if desc == "" {
			desc = fmt.Sprintf("Custom resource definition column (in JSONPath format): %s", pc.JSONPath)
		}
		def := metav1.TableColumnDefinition{Name: pc.Name, Type: pc.Type, Format: pc.Format, Description: desc, Priority: pc.Priority}
		path := jsonpath.New(pc.Name).AllowMissingKeys(true)
		if err := path.Parse(fmt.Sprintf("{%s}", pc.JSONPath)); err != nil {
			cols = append(cols, column{def: def, cell: func(*unstructured.Unstructured, time.Time) any { return nil }})
			continue
		}
		typ := pc.Type
		var buf bytes.Buffer
		cols = append(cols, column{def: def, cell: func(u *unstructured.Unstructured, now time.Time) any {
			results, err := path.FindResults(u.Object)
			if err != nil || len(results) == 0 || len(results[0]) == 0 {
				return nil
			}
			value := results[0][0].Interface()
			if typ == "string" {
				buf.Reset()
				if err := path.PrintResults(&buf, []reflect.Value{reflect.ValueOf(value)}); err != nil {
					return nil
				}
				return buf.String()
			}
			return cellForJSONValue(typ, value, now)
		}})
	}
	return cols
}

// cellForJSONValue is kube-apiserver's conversion of a value found by a printer
// column's JSONPath to a cell of the column's type (apiextensions-apiserver,
// tableconvertor.cellForJSONValue), with the server's clock for dates.
func cellForJSONValue(headerType string, value any, now time.Time) any {
	if value == nil {
		return nil
	}
	switch headerType {
	case "integer":
		switch typed := value.(type) {
		case int64:
			return typed
		case float64:
			return int64(typed)
		case json.Number:
			if i64, err := typed.Int64(); err == nil {
				return i64
			}
		}
	case "number":
		switch typed := value.(type) {
		case int64:
			return float64(typed)
		case float64:
			return typed
		case json.Number:
			if f, err := typed.Float64(); err == nil {
				return f
			}
		}
	case "boolean":
		if b, ok := value.(bool); ok {
			return b
		}
	case "string":
		if s, ok := value.(string); ok {
			return s
		}
	case "date":
		if typed, ok := value.(string); ok {
			var timestamp metav1.Time
			if err := timestamp.UnmarshalQueryParameter(typed); err != nil {
				return "<invalid>"
			}
			return age(timestamp, now)
		}
	}
	return nil
}
