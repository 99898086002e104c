; ptc kernel 1 fused_add_gelu_1  <- %0, %1
define void @fused_add_gelu_1(i64 %begin, i64 %end, ptr noalias %args) {
entry:
  br label %loop
loop:
  %i = phi i64 [ %begin, %entry ], [ %i.next, %loop ]
  ; buf1 = add(buf0, bias)
  %v0 = call float @llvm.ptc.elem(ptr %args, i64 %i, i32 0)
  ; buf2 = gelu(buf1)
  %v1 = call float @llvm.ptc.elem(ptr %args, i64 %i, i32 1)
  %i.next = add nuw i64 %i, 1
  %done = icmp eq i64 %i.next, %end
  br i1 %done, label %exit, label %loop
exit:
  ret void
}
