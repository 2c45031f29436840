from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class HloProto(_message.Message):
    __slots__ = ("hlo_module",)
    HLO_MODULE_FIELD_NUMBER: _ClassVar[int]
    hlo_module: HloModuleProto
    def __init__(self, hlo_module: _Optional[_Union[HloModuleProto, _Mapping]] = ...) -> None: ...

class HloModuleProto(_message.Message):
    __slots__ = ("name", "entry_computation_name", "host_program_shape", "id")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ENTRY_COMPUTATION_NAME_FIELD_NUMBER: _ClassVar[int]
    HOST_PROGRAM_SHAPE_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    name: str
    entry_computation_name: str
    host_program_shape: ProgramShapeProto
    id: int
    def __init__(self, name: _Optional[str] = ..., entry_computation_name: _Optional[str] = ..., host_program_shape: _Optional[_Union[ProgramShapeProto, _Mapping]] = ..., id: _Optional[int] = ...) -> None: ...

class ProgramShapeProto(_message.Message):
    __slots__ = ("parameters", "result", "parameter_names")
    PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    PARAMETER_NAMES_FIELD_NUMBER: _ClassVar[int]
    parameters: _containers.RepeatedCompositeFieldContainer[ShapeProto]
    result: ShapeProto
    parameter_names: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, parameters: _Optional[_Iterable[_Union[ShapeProto, _Mapping]]] = ..., result: _Optional[_Union[ShapeProto, _Mapping]] = ..., parameter_names: _Optional[_Iterable[str]] = ...) -> None: ...

class ShapeProto(_message.Message):
    __slots__ = ("element_type", "dimensions", "tuple_shapes", "layout", "is_dynamic_dimension")
    ELEMENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    TUPLE_SHAPES_FIELD_NUMBER: _ClassVar[int]
    LAYOUT_FIELD_NUMBER: _ClassVar[int]
    IS_DYNAMIC_DIMENSION_FIELD_NUMBER: _ClassVar[int]
    element_type: int
    dimensions: _containers.RepeatedScalarFieldContainer[int]
    tuple_shapes: _containers.RepeatedCompositeFieldContainer[ShapeProto]
    layout: LayoutProto
    is_dynamic_dimension: _containers.RepeatedScalarFieldContainer[bool]
    def __init__(self, element_type: _Optional[int] = ..., dimensions: _Optional[_Iterable[int]] = ..., tuple_shapes: _Optional[_Iterable[_Union[ShapeProto, _Mapping]]] = ..., layout: _Optional[_Union[LayoutProto, _Mapping]] = ..., is_dynamic_dimension: _Optional[_Iterable[bool]] = ...) -> None: ...

class LayoutProto(_message.Message):
    __slots__ = ("minor_to_major", "tiles", "element_size_in_bits", "memory_space")
    MINOR_TO_MAJOR_FIELD_NUMBER: _ClassVar[int]
    TILES_FIELD_NUMBER: _ClassVar[int]
    ELEMENT_SIZE_IN_BITS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_SPACE_FIELD_NUMBER: _ClassVar[int]
    minor_to_major: _containers.RepeatedScalarFieldContainer[int]
    tiles: _containers.RepeatedCompositeFieldContainer[TileProto]
    element_size_in_bits: int
    memory_space: int
    def __init__(self, minor_to_major: _Optional[_Iterable[int]] = ..., tiles: _Optional[_Iterable[_Union[TileProto, _Mapping]]] = ..., element_size_in_bits: _Optional[int] = ..., memory_space: _Optional[int] = ...) -> None: ...

class TileProto(_message.Message):
    __slots__ = ("dimensions",)
    DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    dimensions: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, dimensions: _Optional[_Iterable[int]] = ...) -> None: ...
