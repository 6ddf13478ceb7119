// helmrender renders a Helm chart's templates offline, with Go's text/template
// and the standard library alone: the functions the sandbox chart uses
// (include, toYaml, nindent, indent, quote, default, required, b64enc),
// Helm's context (.Values, .Release, .Chart) and its output (one
// "# Source:" document per template, partials "_*" left out).
//
//	helmrender CHART_DIR < context.json
//
// context.json: {"values": {...}, "chart": {Chart.yaml as JSON},
// "release": {"name": ..., "namespace": ...}}; the YAML files are turned into
// JSON by the caller (tests/integration/test_deploy_k8s.py).
package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"text/template"
)

type context struct {
	Values  map[string]interface{} `json:"values"`
	Chart   map[string]interface{} `json:"chart"`
	Release struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"release"`
}

// empty as Helm's default and if see it: nil, zero, "", false, no elements.
func empty(v interface{}) bool {
	if v == nil {
		return true
	}
	r := reflect.ValueOf(v)
	switch r.Kind() {
	case reflect.String, reflect.Map, reflect.Slice, reflect.Array:
		return r.Len() == 0
	case reflect.Bool:
		return !r.Bool()
	case reflect.Float32, reflect.Float64:
		return r.Float() == 0
	case reflect.Int, reflect.Int64, reflect.Int32:
		return r.Int() == 0
	}
	return false
}

var plain = regexp.MustCompile(`^[A-Za-z_/][A-Za-z0-9_./-]*$`)
var reserved = regexp.MustCompile(`^(?i:true|false|yes|no|on|off|null|y|n|~)$`)

func scalar(v interface{}) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case bool:
		return strconv.FormatBool(x)
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	case string:
		if plain.MatchString(x) && !reserved.MatchString(x) {
			return x
		}
		b, _ := json.Marshal(x) // a JSON string is a YAML double-quoted scalar
		return string(b)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// toYaml: block style, keys sorted (as Helm's, which goes through JSON).
func toYaml(v interface{}) string {
	var b strings.Builder
	emit(&b, v, 0)
	return strings.TrimSuffix(b.String(), "\n")
}

func emit(b *strings.Builder, v interface{}, ind int) {
	pad := strings.Repeat(" ", ind)
	switch x := v.(type) {
	case map[string]interface{}:
		if len(x) == 0 {
			b.WriteString(pad + "{}\n")
			return
		}
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			b.WriteString(pad + scalar(k) + ":")
			child(b, x[k], ind+2)
		}
	case []interface{}:
		if len(x) == 0 {
			b.WriteString(pad + "[]\n")
			return
		}
		for _, e := range x {
			var sub strings.Builder
			emit(&sub, e, ind+2)
			// "- " takes the place of the first line's indentation
			b.WriteString(pad + "- " + strings.TrimPrefix(sub.String(), pad+"  "))
		}
	default:
		b.WriteString(pad + scalar(v) + "\n")
	}
}

func child(b *strings.Builder, v interface{}, ind int) {
	switch x := v.(type) {
	case map[string]interface{}:
		if len(x) > 0 {
			b.WriteString("\n")
			emit(b, v, ind)
			return
		}
	case []interface{}:
		if len(x) > 0 {
			b.WriteString("\n")
			emit(b, v, ind-2)
			return
		}
	}
	var sub strings.Builder
	emit(&sub, v, 0)
	b.WriteString(" " + sub.String())
}

func indent(n int, s string) string {
	pad := strings.Repeat(" ", n)
	return pad + strings.ReplaceAll(s, "\n", "\n"+pad)
}

func render(dir string, ctx *context) (string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "templates", "*"))
	if err != nil {
		return "", err
	}
	sort.Strings(files)
	root := template.New("chart").Option("missingkey=zero")
	funcs := template.FuncMap{
		"include": func(name string, data interface{}) (string, error) {
			var buf bytes.Buffer
			err := root.ExecuteTemplate(&buf, name, data)
			return buf.String(), err
		},
		"toYaml":  toYaml,
		"indent":  indent,
		"nindent": func(n int, s string) string { return "\n" + indent(n, s) },
		"quote": func(v interface{}) string {
			if s, ok := v.(string); ok {
				return strconv.Quote(s)
			}
			return strconv.Quote(fmt.Sprint(v))
		},
		"default": func(d interface{}, v ...interface{}) interface{} {
			if len(v) == 0 || empty(v[0]) {
				return d
			}
			return v[0]
		},
		"required": func(msg string, v interface{}) (interface{}, error) {
			if empty(v) {
				return nil, errors.New(msg)
			}
			return v, nil
		},
		"b64enc": func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) },
	}
	root.Funcs(funcs)
	var names []string
	for _, f := range files {
		text, err := os.ReadFile(f)
		if err != nil {
			return "", err
		}
		name := "templates/" + filepath.Base(f)
		if _, err := root.New(name).Parse(string(text)); err != nil {
			return "", err
		}
		if !strings.HasPrefix(filepath.Base(f), "_") && strings.HasSuffix(f, ".yaml") {
			names = append(names, name)
		}
	}
	chartName, _ := ctx.Chart["name"].(string)
	data := map[string]interface{}{
		"Values": ctx.Values,
		"Release": map[string]interface{}{
			"Name": ctx.Release.Name, "Namespace": ctx.Release.Namespace, "Service": "Helm",
			"IsInstall": true, "IsUpgrade": false, "Revision": 1,
		},
		"Chart": map[string]interface{}{
			"Name": chartName, "Version": ctx.Chart["version"], "AppVersion": ctx.Chart["appVersion"],
			"Description": ctx.Chart["description"], "Type": ctx.Chart["type"],
		},
	}
	var out strings.Builder
	for _, name := range names {
		var buf bytes.Buffer
		if err := root.ExecuteTemplate(&buf, name, data); err != nil {
			return "", err
		}
		text := strings.ReplaceAll(buf.String(), "<no value>", "")
		if strings.TrimSpace(text) == "" {
			continue
		}
		fmt.Fprintf(&out, "---\n# Source: %s/%s\n%s\n", chartName, name, strings.TrimRight(text, "\n"))
	}
	return out.String(), nil
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: helmrender CHART_DIR < context.json")
		os.Exit(2)
	}
	var ctx context
	if err := json.NewDecoder(os.Stdin).Decode(&ctx); err != nil {
		fmt.Fprintln(os.Stderr, "helmrender: context:", err)
		os.Exit(2)
	}
	out, err := render(os.Args[1], &ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "helmrender:", err)
		os.Exit(1)
	}
	fmt.Print(out)
}
