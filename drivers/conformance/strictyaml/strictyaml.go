// Package strictyaml decodes dralab's YAML files (lab configurations,
// scenarios, GPU profiles, driver manifests) one way: strictly, so that an
// unknown or misspelt field, a duplicate key or a wrong type is an error
// naming the field, never silently ignored.
package strictyaml

import (
	"bytes"
	"errors"

	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// Decode decodes a YAML document into out. Callers prefix errors with the
// file they read.
func Decode(data []byte, out any) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return errors.New("the file is empty")
	}
	jsonData, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return err
	}
	// A file of comments only decodes to null, which would otherwise pass
	// and fail later with every required field at once.
	if string(bytes.TrimSpace(jsonData)) == "null" {
		return errors.New("the file has no content, only comments")
	}
	strict, err := sigsjson.UnmarshalStrict(jsonData, out)
	if err != nil {
		return err
	}
	return errors.Join(strict...)
}
