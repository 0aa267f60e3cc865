package parameters

import (
	"strings"
	"testing"
)

func TestEvaluateTemplate(t *testing.T) {
	data := VolumeTemplateData{PVCName: "data-db-0", PVCNamespace: "Shop", PVName: "pvc-1234"}
	tests := []struct {
		tmpl string
		want string
	}{
		{tmpl: "", want: ""},
		{tmpl: "plain text", want: "plain text"},
		{tmpl: "{{ .PVCName }}", want: "data-db-0"},
		{tmpl: "{{ .PVCNamespace }}/{{ .PVCName }}", want: "Shop/data-db-0"},
		{tmpl: "{{ .PVCNamespace | toLower }}", want: "shop"},
		{tmpl: "{{ toUpper .PVName }}", want: "PVC-1234"},
		{tmpl: `{{ field "-" 1 .PVCName }}`, want: "db"},
		{tmpl: `{{ .PVCName | field "-" 2 }}`, want: "0"},
		{tmpl: `{{ substring 0 4 .PVCName }}`, want: "data"},
		{tmpl: `{{ substring -5 4 .PVCName }}`, want: "data"},
		{tmpl: `{{ substring 5 -1 .PVCName }}`, want: "db-0"},
		{tmpl: `{{ substring 5 999 .PVCName }}`, want: "db-0"},
		{tmpl: `{{ substring 8 2 .PVCName }}`, want: ""},
		{tmpl: `{{ substring 50 60 .PVCName }}`, want: ""},
		{tmpl: `{{ if contains "db" .PVCName }}database{{ else }}other{{ end }}`, want: "database"},
		{tmpl: `{{ index "-" .PVCName }}`, want: "4"},
		{tmpl: `{{ lastIndex "-" .PVCName }}`, want: "7"},
		{tmpl: `{{ $n := .PVCName }}{{ with $n }}{{ . }}{{ end }}`, want: "data-db-0"},
		{tmpl: `{{ if and (eq .PVCNamespace "Shop") (ne .PVName "") }}yes{{ end }}`, want: "yes"},
		{tmpl: `{{ len .PVCName }}`, want: "9"},
		{tmpl: `{{ slice .PVCName 0 2 }}`, want: "da"},
		{tmpl: `{{ print .PVCName "-" 7 }}`, want: "data-db-0-7"},
		{tmpl: `{{/* a comment */}}x`, want: "x"},
	}
	for _, tc := range tests {
		t.Run(tc.tmpl, func(t *testing.T) {
			got, err := evaluateTemplate("tagSpecification_1", tc.tmpl, data)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestEvaluateTemplateRefusesUnsafeConstructs(t *testing.T) {
	data := VolumeTemplateData{PVCName: "a"}
	tests := []struct {
		tmpl string
		want string
	}{
		{tmpl: `{{ call .PVCName }}`, want: `function "call" is not allowed`},
		{tmpl: `{{ printf "%0999999999d" 1 }}`, want: `function "printf" is not allowed`},
		{tmpl: `{{ html .PVCName }}`, want: `function "html" is not allowed`},
		{tmpl: `{{ js .PVCName }}`, want: `function "js" is not allowed`},
		{tmpl: `{{ .PVCName | urlquery }}`, want: `function "urlquery" is not allowed`},
		{tmpl: `{{ range 1000000000 }}{{ end }}`, want: `"range" is not allowed`},
		{tmpl: `{{ define "x" }}{{ template "x" }}{{ end }}{{ template "x" }}`, want: "define and block are not allowed"},
		{tmpl: `{{ define "x" }}y{{ end }}`, want: "define and block are not allowed"},
		{tmpl: `{{ block "x" . }}y{{ end }}`, want: "define and block are not allowed"},
		{tmpl: `{{ template "tagSpecification_1" }}`, want: `"template" is not allowed`},
		{tmpl: `{{ if true }}{{ template "tagSpecification_1" }}{{ end }}`, want: `"template" is not allowed`},
		{tmpl: `{{ with .PVCName }}{{ call . }}{{ end }}`, want: `function "call" is not allowed`},
		{tmpl: `{{ .PVCName`, want: "bad template"},
		{tmpl: `{{ nosuchfunc }}`, want: "bad template"},
		{tmpl: `{{ .NoSuchField }}`, want: "template failed"},
		{tmpl: `{{ field "-" 5 .PVCName }}`, want: "field 5"},
		{tmpl: `{{ field "-" -1 .PVCName }}`, want: "field -1"},
		{tmpl: `{{ slice .PVCName 0 99 }}`, want: "template failed"},
		{tmpl: `{{ index 1 2 }}`, want: "template failed"},
		{tmpl: strings.Repeat(`{{ print "0123456789" }}`, 200), want: "longer than"},
	}
	for _, tc := range tests {
		t.Run(tc.tmpl[:min(len(tc.tmpl), 60)], func(t *testing.T) {
			got, err := evaluateTemplate("tagSpecification_1", tc.tmpl, data)
			if err == nil {
				t.Fatalf("got %q, want an error", got)
			}
			wantInvalid(t, err, tc.want)
		})
	}
}
